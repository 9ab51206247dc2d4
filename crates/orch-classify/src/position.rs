//! Where on its line a signature stands: in a *reporting position* (the line is an error
//! being raised or reported by the program that failed) or a *mention* (the same words
//! inside a config value, a quoted string, a tip, help text, an echoed command).
//!
//! A line is first normalised ([`super::normalise`]): the decorations tools put in front of
//! what they report are peeled off. What is left is the *body*; the strongest level word seen
//! on the way is remembered.
//!
//! A match is a mention when the body is an echoed command (`+ `, `$ `), a `#` comment, a
//! `key: value` / `key=value` config line, or when the match sits inside quotes. A
//! [`Kind::Message`] signature (the text of an error message, which tips and configs
//! quote) must moreover stand where a report starts: at the start of the body, after an
//! exception name (`torch.OutOfMemoryError: `, `ray.exceptions.RayTaskError(X): `), after
//! an error word (`error:`, `failed`, `fatal`), or on a line that an error-level logger
//! header introduced. A [`Kind::Lead`] signature (an exception class alone) must open the
//! body. Warning/info-level lines never report a message or lead signature.

use std::sync::LazyLock;

use memchr::memmem::Finder;

use super::normalise::{Level, level_word, strip_prefixes};
use super::rules::Kind;

/// The shape of one segment, computed once per segment that holds a candidate.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Position {
    /// Offset of the body (after the known prefixes).
    pub body: usize,
    pub level: Level,
    /// The whole segment is a mention: echo, comment, config line.
    pub mention: bool,
    /// The body starts like a report: an exception name or an error word.
    pub reports: bool,
    /// The segment starts at the start of its line (false for a piece of an over-long
    /// line whose start was dropped).
    pub start_known: bool,
    /// Somewhere in the body an error word and its colon introduce a reported error
    /// (`Server error: CUDA out of memory`): a message may decide mid-line after it.
    pub error_colon: bool,
    /// Where (in the segment) the text after that error word and colon starts: a message
    /// further on in the same report decides too (glog's `Check failed: e == cudaSuccess ||
    /// e == cudaErrorCudartUnloading CUDA: out of memory`), unless advice words stand between.
    pub error_colon_end: Option<usize>,
}

impl Position {
    pub(crate) fn of(seg: &[u8]) -> Position {
        let (mut body, level) = strip_prefixes(seg);
        let b = &seg[body..];
        let mention = is_echo(b)
            || (b.first() == Some(&b'#') && !is_block_count(b) && !is_hash_decoration(b))
            || is_config_line(b)
            || is_prose_label(b);
        if mention {
            // Nothing in a mention decides: the rest is not needed.
            return Position {
                body,
                level,
                mention,
                reports: false,
                start_known: true,
                error_colon: false,
                error_colon_end: None,
            };
        }
        let reports = exception_name_len(b).is_some() || starts_with_error_word(b);
        // A Python warning (`memory.py:330: UserWarning: ...`) reports nothing, wherever its
        // category stands.
        let level = if level == Level::Unknown && names_a_warning(b) {
            Level::Quiet
        } else {
            level
        };
        // Only asked for where nothing else lets a message decide past the lead.
        let error_colon_end = (!reports && level != Level::Error && level != Level::Quiet)
            .then(|| error_colon_at(b))
            .flatten()
            .map(|k| body + k);
        let error_colon = error_colon_end.is_some();
        if let Some(n) = exception_repr_len(b) {
            // `OutOfMemoryError('CUDA out of memory ...')`: the exception a wrapper names as its
            // cause (Hydra's `InstantiationException` prints it on the next line). The quote
            // opens the message; what follows is reported, not quoted.
            body += n;
        }
        Position {
            body,
            level,
            mention,
            reports,
            start_known: true,
            error_colon,
            error_colon_end,
        }
    }

    /// A piece of an over-long line whose start was dropped: only quotes within the
    /// piece can be judged.
    pub(crate) fn unknown_start() -> Position {
        Position {
            body: 0,
            level: Level::Unknown,
            mention: false,
            reports: true,
            start_known: false,
            error_colon: false,
            error_colon_end: None,
        }
    }

    /// Where a report may start: the body, past the `...` / counters a bare message follows.
    pub(crate) fn lead(&self, seg: &[u8]) -> usize {
        lead_end(seg, self.body)
    }

    /// A message or lead signature can decide only at [`Position::lead`]: the line neither
    /// starts with an exception name or error word nor came with an error-level header.
    pub(crate) fn lead_only(&self) -> bool {
        self.start_known && !self.reports && self.level != Level::Error && !self.error_colon
    }

    /// Is a needle at `at` inside a quoted string of the body?
    pub(crate) fn quoted(&self, seg: &[u8], at: usize) -> bool {
        at > self.body && in_quotes(&seg[self.body..at])
    }

    /// May a match of a `kind` signature starting at `at` decide a class?
    pub(crate) fn allows(&self, seg: &[u8], kind: Kind, at: usize) -> bool {
        if self.mention {
            return false;
        }
        let at = at.max(self.body);
        if in_quotes(&seg[self.body..at]) {
            return false;
        }
        match kind {
            Kind::Format => true,
            Kind::Message => {
                if self.level == Level::Quiet {
                    return false;
                }
                self.reports
                    || self.level == Level::Error
                    || at <= lead_end(seg, self.body)
                    || error_word_before(&seg[self.body..at])
                    || self
                        .error_colon_end
                        .is_some_and(|k| at >= k && same_report(&seg[k..at]))
                    || glued(seg, self.body, at)
            }
            Kind::Lead => self.level != Level::Quiet && at <= lead_end(seg, self.body),
            Kind::Name => self.level != Level::Quiet,
        }
    }
}

/// A report printed on the line of a progress display without a newline before it
/// (KoboldCpp's `Processing Prompt [BLAS] (512 / 12710 tokens)CUDA error: out of memory`): the
/// match starts with a capital right after a `)`, which no prose or config value writes (not
/// after a `]`: an unpeeled level tag, a version or an issue number), and nothing after it
/// says it was recovered from.
fn glued(seg: &[u8], body: usize, at: usize) -> bool {
    at > body
        && seg.get(at).is_some_and(u8::is_ascii_uppercase)
        && seg[at - 1] == b')'
        && !has_advice_word(&seg[at..])
        && !RECOVERED
            .iter()
            .any(|w| contains(&seg[at..].to_ascii_lowercase(), w))
}

/// Words after a failure's text that say the program went on.
const RECOVERED: [&[u8]; 4] = [b"retry", b"recovered", b"fixed", b"skipped"];

/// Is the text between an error word's colon and a later match one report (glog's `e ==
/// cudaSuccess || e == cudaErrorCudartUnloading `), not a new sentence, a list of possible
/// causes, advice, a negation or a metric?
fn same_report(gap: &[u8]) -> bool {
    const NOT: [&str; 13] = [
        "no", "not", "none", "without", "expected", "possible", "causes", "check", "consider",
        "prevent", "see", "count", "try",
    ];
    !has_advice_word(gap)
        && !gap
            .trim_ascii_start()
            .first()
            .is_some_and(u8::is_ascii_digit)
        && ![&b". "[..], b"; ", b", "].iter().any(|s| contains(gap, s))
        && !gap
            .split(|c| !c.is_ascii_alphanumeric())
            .any(|w| NOT.iter().any(|n| w.eq_ignore_ascii_case(n.as_bytes())))
}

/// Skip `...`/`…`/spaces (and counters like `+5 `) in front of a bare message (app code
/// printing `str(e)`).
fn lead_end(seg: &[u8], mut i: usize) -> usize {
    loop {
        match seg.get(i..) {
            Some([b'.' | b' ' | b'\t' | b'+' | b'0'..=b'9', ..]) => i += 1,
            Some([0xe2, 0x80, 0xa6, ..]) => i += 3,
            _ => return i,
        }
    }
}

/// A `#` that starts a decoration, not a comment: GitHub Actions' `##[error]`, rsyslog's escaped
/// ANSI `#033[`.
pub(crate) fn is_hash_decoration(b: &[u8]) -> bool {
    b.starts_with(b"##[") || b.starts_with(b"#033[")
}

/// vLLM's `# GPU blocks: N, # CPU blocks: M` / `# cuda blocks: N` report (not a comment).
pub(crate) fn is_block_count(b: &[u8]) -> bool {
    b.starts_with(b"# GPU blocks: ") || b.starts_with(b"# cuda blocks: ")
}

/// `Name('` / `Name("` where `Name` is an exception class: the length up to and including
/// the quote.
fn exception_repr_len(b: &[u8]) -> Option<usize> {
    let n = b.iter().take_while(|&&c| is_word(c) || c == b'.').count();
    if n == 0 || !matches!(b.get(n..n + 2), Some(b"('" | b"(\"")) {
        return None;
    }
    let mut name = b[..n].to_vec();
    name.push(b':');
    exception_name_len(&name).map(|_| n + 2)
}

/// An echoed shell command: `set -x`'s `+ `/`++ `, a prompt `$ ` / `> ` / `# ` / `>>> `.
fn is_echo(b: &[u8]) -> bool {
    let plus = b.iter().take_while(|&&c| c == b'+').count();
    (plus > 0 && b.get(plus) == Some(&b' '))
        || b.starts_with(b"$ ")
        || b.starts_with(b"> ")
        || b.starts_with(b">>> ")
}

/// A config line: `key: value`, `key = value`, `- key: value`, `--flag=value`, or argparse
/// help (`  --flag N   text`), where the key is a lower-case identifier. Keys that tools
/// use to report (`error:`, torchrun's `traceback :` / `exitcode  :`) are not config.
fn is_config_line(b: &[u8]) -> bool {
    let b = b.strip_prefix(b"- ").unwrap_or(b);
    if b.starts_with(b"--") && b.get(2).is_some_and(u8::is_ascii_lowercase) {
        return true;
    }
    let key = b
        .iter()
        .take_while(|c| {
            c.is_ascii_lowercase() || c.is_ascii_digit() || matches!(c, b'_' | b'.' | b'-')
        })
        .count();
    if key == 0 || !b[0].is_ascii_lowercase() {
        return false;
    }
    let rest = &b[key..];
    let sp = rest.iter().take_while(|&&c| c == b' ').count();
    let sep_ok = match rest.get(sp) {
        // A C function naming itself before its error (llama.cpp's `llama_init_from_model:
        // failed to initialize the context: ...`, `prog: fatal error: ...`) reports: the value
        // is a sentence that opens with an error word.
        Some(b':')
            if !has_advice_word(&b[..key])
                && is_sentence_opening_with_error_word(rest[sp + 1..].trim_ascii_start()) =>
        {
            false
        }
        // ... or a C++ function naming itself in turn (llama.cpp's `ggml_vulkan:
        // vk::Device::allocateMemory: ErrorOutOfDeviceMemory`): a chain of reporters.
        Some(b':')
            if !has_advice_word(&b[..key])
                && opens_with_qualified_name(rest[sp + 1..].trim_ascii_start()) =>
        {
            false
        }
        Some(b':') => rest
            .get(sp + 1)
            .is_none_or(|c| matches!(c, b' ' | b'"' | b'\'' | b'|' | b'>')),
        // `key=value` starting a sentence (`max_total_tokens=131072 is larger than ...`) is
        // a report about the setting, not the setting.
        Some(b'=') => {
            let value = &rest[sp + 1..];
            let v = value.iter().take_while(|&&c| c != b' ').count();
            !(value[v..].starts_with(b" is ") || value[v..].starts_with(b" was "))
        }
        _ => false,
    };
    const REPORTERS: [&[u8]; 24] = [
        b"error",
        b"reason",
        b"state",
        b"status",
        b"bash",
        b"sh",
        b"zsh",
        b"python",
        b"python3",
        b"kernel",
        b"mpirun",
        b"traceback",
        b"exitcode",
        b"error_file",
        b"srun",
        b"salloc",
        b"sbatch",
        b"yhrun",
        b"fatal",
        b"warning",
        b"slurmstepd",
        b"oom_reaper",
        b"exit_type",
        b"exit_detail",
    ];
    sep_ok && !REPORTERS.contains(&&b[..key]) && !b[..key].starts_with(b"slurmstepd-")
}

/// Prose that a label opens (`Known issue: ...`, `Note: ...`, `Tip: ...`, `FAQ-3: ...`): what
/// follows is written about a failure, in a README, a changelog or a help text, whatever names
/// it quotes.
fn is_prose_label(b: &[u8]) -> bool {
    const LABELS: [&[u8]; 6] = [b"known issue", b"note", b"tip", b"hint", b"faq", b"caveat"];
    let n = b
        .iter()
        .take_while(|c| c.is_ascii_alphanumeric() || matches!(c, b' ' | b'-'))
        .count();
    let label = b[..n].to_ascii_lowercase();
    b.get(n) == Some(&b':')
        && LABELS.iter().any(|l| {
            label.starts_with(l)
                && label[l.len()..]
                    .iter()
                    .all(|c| c.is_ascii_digit() || matches!(c, b' ' | b'-' | b's'))
        })
}

/// `vk::Device::allocateMemory: ...`: a C++ qualified name, then `: `.
fn opens_with_qualified_name(value: &[u8]) -> bool {
    let n = value
        .iter()
        .take_while(|&&c| is_word(c) || c == b':')
        .count();
    let name = &value[..n];
    name.ends_with(b":")
        && value.get(n) == Some(&b' ')
        && memchr::memmem::find(name, b"::").is_some()
        && name.first().is_some_and(|c| c.is_ascii_alphabetic())
}

/// `failed to allocate ...`, `error: ...`: more than one word, the first an error word.
fn is_sentence_opening_with_error_word(value: &[u8]) -> bool {
    starts_with_error_word(value) && value.contains(&b' ')
}

/// Is the end of `before` inside a quoted string? `"` toggles; `'` and `` ` `` open only
/// after a non-word byte and close only before one (so `can't` is no quote). A quote a
/// wrapper opens right after `error ` / `error: ` holds the error it re-raises (vLLM's
/// `Worker failed with error 'CUDA error: ...'`), which is reported, not mentioned.
pub(crate) fn in_quotes(before: &[u8]) -> bool {
    let mut open: Option<u8> = None;
    let mut opened_at = 0;
    // Jump from quote character to quote character (SIMD); most bodies have few.
    for k in memchr::memchr3_iter(b'"', b'\'', b'`', before) {
        let c = before[k];
        let word_before = k > 0 && is_word(before[k - 1]);
        let word_after = before.get(k + 1).is_some_and(|&n| is_word(n));
        // An opening quote is followed by what it quotes: one followed by a space closes a
        // quote this reading missed (`Command '['python3', '-m']' died with ...`).
        let space_after = before.get(k + 1).is_some_and(u8::is_ascii_whitespace);
        match (open, c) {
            (None, _) if space_after => {}
            (None, b'"') => (open, opened_at) = (Some(b'"'), k),
            (Some(b'"'), b'"') => open = None,
            (None, b'\'' | b'`') if !word_before => (open, opened_at) = (Some(c), k),
            (Some(q), _) if q == c && q != b'"' && !word_after => open = None,
            _ => {}
        }
    }
    open.is_some() && !is_reraised_error(&before[..opened_at])
}

/// Does a quote opened after `before` hold a re-raised error (`... failed with error '`), the
/// message of an exception repr a wrapper names as its cause (`... the original error:
/// OutOfMemoryError('CUDA out of memory ...')`; not a `raise X('...')` source line), or the
/// C++ exception a `terminate called after throwing an instance of '...'` reports?
fn is_reraised_error(before: &[u8]) -> bool {
    if let Some(name) = before.strip_suffix(b"(")
        && (name.ends_with(b"Error") || name.ends_with(b"Exception"))
    {
        let start = name
            .iter()
            .rposition(|&c| !(is_word(c) || c == b'.'))
            .map_or(0, |i| i + 1);
        return !name[..start].trim_ascii_end().ends_with(b"raise");
    }
    if before.ends_with(b"panicked at ") {
        // Rust's `thread 'main' panicked at 'message'`: the quote holds what is reported.
        return true;
    }
    if before.ends_with(b"throwing an instance of ") {
        // C++'s `terminate called after throwing an instance of 'std::bad_alloc'`: the quote
        // names the exception being reported.
        return true;
    }
    let b = before.strip_suffix(b" ").unwrap_or(before);
    let b = b.strip_suffix(b":").unwrap_or(b);
    // Rust's debug print of an error value (tch's `TorchError { c_error: "..." }`): its string
    // field holds the error reported.
    if let Some(open) = b.iter().rposition(|&c| c == b'{') {
        let field = b[open + 1..].trim_ascii();
        if !field.is_empty()
            && field.iter().all(|&c| is_word(c))
            && b[..open].trim_ascii_end().ends_with(b"Error")
        {
            return true;
        }
    }
    // A JSON error body's message (`{"error": "CUDA out of memory ..."}`), not any JSON value.
    for key in [&b"\"error\""[..], b"\"detail\""] {
        if b.trim_ascii_end().ends_with(key) {
            return true;
        }
    }
    b.len() >= 5
        && b[b.len() - 5..].eq_ignore_ascii_case(b"error")
        && b.len() > 5
        && b[b.len() - 6] == b' '
}

pub(crate) fn is_word(c: u8) -> bool {
    c.is_ascii_alphanumeric() || c == b'_'
}

/// `torch.OutOfMemoryError:`, `RuntimeError:`, `ray.exceptions.RayTaskError(OutOfMemoryError):`,
/// `Exception:`, `KeyboardInterrupt` (end of line): the length of the name part (before
/// the `:`), or `None`. Names ending in `Warning` are not errors.
pub(crate) fn exception_name_len(b: &[u8]) -> Option<usize> {
    let n = b.iter().take_while(|&&c| is_word(c) || c == b'.').count();
    if n == 0 || !(b[0].is_ascii_alphabetic() || b[0] == b'_') {
        return None;
    }
    let name = &b[..n];
    // A private class keeps its leading underscores (numpy's `_ArrayMemoryError`).
    let last = name.rsplit(|&c| c == b'.').next()?;
    let last = &last[last.iter().take_while(|&&c| c == b'_').count()..];
    if !last.first().is_some_and(u8::is_ascii_uppercase) {
        return None;
    }
    const ENDS: [&[u8]; 7] = [
        b"Error",
        b"Exception",
        b"Exit",
        b"Interrupt",
        b"Failure",
        b"Fault",
        b"Exceeded",
    ];
    if !ENDS.iter().any(|e| last.ends_with(e)) {
        return None;
    }
    let mut j = n;
    if b.get(j) == Some(&b'(') {
        let inner = b[j + 1..]
            .iter()
            .take_while(|&&c| is_word(c) || c == b'.')
            .count();
        match b.get(j + 1 + inner) {
            Some(b')') => j += inner + 2,
            // A paste cut inside the wrapped name (`ray.exceptions.RayTaskError(ValueErr`):
            // the line ends there, still a report's start.
            None if inner > 0 => return Some(j + 1 + inner),
            _ => return None,
        }
    }
    match b.get(j) {
        None => Some(j),
        Some(b':') if b.get(j + 1).is_none_or(|c| c.is_ascii_whitespace()) => Some(j),
        _ => None,
    }
}

/// Words that, followed by a colon, introduce the error being reported mid-line:
/// `Server error: CUDA out of memory`, `cudaMalloc failed: out of memory`, `fork: retry:
/// Resource temporarily unavailable` is not one (`retry`).
const ERROR_WORDS: [&[u8]; 4] = [b"error", b"failed", b"fatal", b"exception"];

/// Words of advice and conditions: a message after them is a tip (`if training fails with
/// error: CUDA out of memory, ...`, `Known issue: ...`), not a report.
const ADVICE_WORDS: [&[u8]; 14] = [
    b"if",
    b"when",
    b"may",
    b"might",
    b"can",
    b"could",
    b"known",
    b"common",
    b"hint",
    b"tip",
    b"avoid",
    b"usually",
    b"typically",
    b"e.g.",
];

/// Does `b` hold a word of advice ([`ADVICE_WORDS`], any case)?
pub(crate) fn has_advice_word(b: &[u8]) -> bool {
    b.split(|c| !(c.is_ascii_alphanumeric() || *c == b'.'))
        .any(|w| ADVICE_WORDS.iter().any(|a| w.eq_ignore_ascii_case(a)))
}

/// A Python warning category (`UserWarning:`, `FutureWarning:`) on the line.
fn names_a_warning(b: &[u8]) -> bool {
    static WARNING: LazyLock<Finder<'static>> = LazyLock::new(|| Finder::new(b"Warning: "));
    WARNING.find_iter(b).any(|k| k > 0 && is_word(b[k - 1]))
}

/// Does `before` (the body up to a match) end with an error word and its colon, then spaces
/// and at most one opening quote? The word is the whole token before the colon, so
/// `torch.OutOfMemoryError: ` (an exception name, which tips quote) is not one.
fn error_word_before(before: &[u8]) -> bool {
    let mut b = before.trim_ascii_end();
    let mut quoted = false;
    if let Some((&q, rest)) = b.split_last()
        && matches!(q, b'\'' | b'"' | b'`')
    {
        b = rest.trim_ascii_end();
        quoted = true;
    }
    // An exception's repr reports its argument (`DriverError(CUDA_ERROR_OUT_OF_MEMORY, ..)`),
    // and a level tag reports what follows it mid-line (`[TensorRT-LLM][ERROR] CUDA runtime
    // error ..`).
    if let Some(name) = b.strip_suffix(b"(")
        && (name.ends_with(b"Error") || name.ends_with(b"Exception"))
    {
        // Not a source line that raises it.
        let start = name
            .iter()
            .rposition(|&c| !(is_word(c) || c == b'.'))
            .map_or(0, |i| i + 1);
        return !name[..start].trim_ascii_end().ends_with(b"raise");
    }
    if let Some(tag) = b.strip_suffix(b"]") {
        let open = tag.iter().rposition(|&c| c == b'[').map_or(0, |i| i + 1);
        return matches!(level_word(&tag[open..].to_ascii_uppercase()), Some((n, Level::Error)) if n == tag.len() - open);
    }
    // `failed with error 'X'`: a quote opened after an error word holds the error.
    let b = match b.strip_suffix(b":") {
        Some(b) => b,
        None if quoted => b,
        None => return false,
    };
    let start = b
        .iter()
        .rposition(|c| {
            c.is_ascii_whitespace() || matches!(c, b'[' | b'(' | b',' | b';' | b'|' | b':')
        })
        .map_or(0, |i| i + 1);
    let word = &b[start..];
    ERROR_WORDS.iter().any(|w| word.eq_ignore_ascii_case(w)) && !has_advice_word(&b[..start])
}

/// The offset just past the first `error: ` / `failed: ` ... in `b` (see [`error_word_before`]).
/// Also just past an exception's repr opening mid-line (`Model failed with error
/// `DriverError(CUDA_ERROR_OUT_OF_MEMORY, "out of memory")``), which reports its argument.
fn error_colon_at(b: &[u8]) -> Option<usize> {
    memchr::memchr2_iter(b':', b'(', b)
        .map(|k| k + 1)
        .find(|&k| {
            error_word_before(&b[..k]) && (b[k - 1] == b'(' || b.get(k).is_none_or(|c| *c == b' '))
        })
}

/// Does `b` open the way a report does: a decoration, a timestamp, an exception name, an error
/// word or a level word?
pub(crate) fn opens_report(b: &[u8]) -> bool {
    matches!(b.first(), Some(b'[' | b'(' | b'0'..=b'9' | 0x1b))
        || exception_name_len(b).is_some()
        || starts_with_error_word(b)
        || level_word(b).is_some()
}

/// `error:`, `Error while ...`, `failed (exitcode ...)`, `FAILED`, `fatal:`, and the
/// `Exception in <where>: <error>` of libraries that catch and print (Chainer's trainer,
/// Python's `threading` and `asyncio`).
fn starts_with_error_word(b: &[u8]) -> bool {
    const WORDS: [&[u8]; 5] = [b"error", b"failed", b"failure", b"fatal", b"exception in "];
    WORDS.iter().any(|w| {
        b.len() > w.len()
            && b[..w.len()].eq_ignore_ascii_case(w)
            && (w.ends_with(b" ") || !is_word(b[w.len()]))
    })
}

pub(crate) fn contains(hay: &[u8], needle: &[u8]) -> bool {
    // Most haystacks here are a prefix or a name: a plain scan beats building a searcher.
    if hay.len() < 256 {
        return needle.is_empty() || hay.windows(needle.len()).any(|w| w == needle);
    }
    memchr::memmem::find(hay, needle).is_some()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exception_names() {
        for s in [
            "torch.OutOfMemoryError: CUDA",
            "numpy.core._exceptions._ArrayMemoryError: Unable",
            "ray.exceptions.RayTaskError(OutOfMemoryError): ray::W",
            "Exception: Capture",
            "KeyboardInterrupt",
            "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: ",
            "ray.exceptions.RayTaskError(ValueErr",
        ] {
            assert!(exception_name_len(s.as_bytes()).is_some(), "{s}");
        }
        for s in [
            "UserWarning: CUDA",
            "notes: x",
            "rank3.log:torch.OutOfMemoryError: x",
            "Error executing job",
            "OOMError-prone config: x",
            "ray.exceptions.RayTaskError(",
            "RayTaskError(ValueError x",
        ] {
            assert!(exception_name_len(s.as_bytes()).is_none(), "{s}");
        }
    }

    #[test]
    fn quotes() {
        assert!(in_quotes(br#"notes: "torch.OutOfMemoryError: "#));
        assert!(in_quotes(b"grep -c '"));
        assert!(!in_quotes(b"the worker's "));
        assert!(!in_quotes(br#"a "b" "#));
        assert!(in_quotes(b"see `"));
    }

    #[test]
    fn config_lines() {
        for s in [
            "notes: \"x\"",
            "oom_hint: lower",
            "- name: x",
            "max_retries=3",
            "--oom-retry  retry",
        ] {
            assert!(is_config_line(s.as_bytes()), "{s}");
        }
        for s in [
            "error: Detected",
            "traceback : Signal 9",
            "exitcode  : -9",
            "srun: error:",
            "slurmstepd-n1: error:",
            "torch.OutOfMemoryError: x",
            "failed (exitcode: -9)",
            "ggml_vulkan: vk::Device::allocateMemory: ErrorOutOfDeviceMemory",
        ] {
            assert!(!is_config_line(s.as_bytes()), "{s}");
        }
    }
}
