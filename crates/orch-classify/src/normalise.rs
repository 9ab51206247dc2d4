//! The normaliser: peels the decorations tools put in front of what a program reports, before
//! any rule looks at a line ([`super::position`] then judges what is left).
//!
//! A line is first stripped of the prefixes that tools put in front of what they report:
//! ANSI colour, Ray's `(WorkerDict pid=..)` / `(raylet)`, torch's `[rank3]:`, glog
//! `[E314 14:33:45.17 ProcessGroupNCCL.cpp:607]` / `E1122 12:00:00.123 12 file.cc:12]`,
//! timestamps (`[2026-09-13 16:06:07]`, `[2025-07-02 07:41:59 DP0 TP0]`,
//! `2025-03-14 14:23:09,117`), vLLM's `ERROR 11-18 18:07:28 engine.py:366]` and
//! `ERROR 10-25 13:08:43 [core.py:708]` headers, Python logging's `ERROR:name:`, `srun -l`
//! task labels (`3: `), docker-compose's `vllm-1  | `, torchrun's `[0]:` failure index,
//! upper-case stream labels (`SUBPROCESS: `), ComfyUI's `!!! Exception during processing !!! `.
//! What is left is the *body*; the strongest level word seen on the way is remembered.
//!
//! The decorations are data (`data/decorations.tsv`): the rows marked `builtin` are recognised
//! here by code (they are on nearly every line of a training log), the others by
//! [`super::decorations`]' regexes.

use super::position::{contains, is_word, opens_report};

/// The level word of a stripped logger header, if any.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default)]
pub(crate) enum Level {
    #[default]
    Unknown,
    /// DEBUG / INFO / WARNING (and glog I / W).
    Quiet,
    /// ERROR / CRITICAL / FATAL (and glog E / F).
    Error,
}

/// Body offset and strongest level after stripping every known prefix, repeatedly.
pub(crate) fn strip_prefixes(seg: &[u8]) -> (usize, Level) {
    strip(seg, |_, _| {})
}

/// The decorations `strip_prefixes` peels off `seg`, in order, each with its text (for
/// `orch classify -v`), and the body.
pub fn explain(seg: &[u8]) -> (Vec<(&'static str, String)>, String) {
    let mut peeled = Vec::new();
    let (body, _) = strip(seg, |name, span: &[u8]| {
        peeled.push((name, String::from_utf8_lossy(span).into_owned()));
    });
    (peeled, String::from_utf8_lossy(&seg[body..]).into_owned())
}

/// [`strip_prefixes`], telling `note` the name (a row of `data/decorations.tsv`) and the text of
/// each decoration peeled.
fn strip(seg: &[u8], mut note: impl FnMut(&'static str, &[u8])) -> (usize, Level) {
    let mut i = 0;
    let mut level = Level::Unknown;
    let mut first = true;
    loop {
        let before = i;
        let past_ansi = skip_space_and_ansi(seg, i);
        if seg[i..past_ansi].contains(&0x1b) {
            note("ansi", &seg[i..past_ansi]);
        }
        i = past_ansi;
        if first {
            first = false;
            if let Some(j) = srun_label(seg, i) {
                note("srun-label", &seg[i..j]);
                i = j;
                continue;
            }
            if let Some(j) = compose_prefix(seg, i) {
                note("compose", &seg[i..j]);
                i = j;
                continue;
            }
        }
        let step = match seg.get(i) {
            Some(b'(') => paren_prefix(seg, i).map(|j| (j, Level::Unknown, "ray-actor")),
            Some(b'[') => bracket_prefix(seg, i).or_else(|| bracketed_field(seg, i)),
            Some(c) if c.is_ascii_digit() => {
                timestamp(seg, i).map(|j| (j, Level::Unknown, "timestamp"))
            }
            Some(c) if c.is_ascii_uppercase() => level_header(seg, i)
                .map(|(j, lv)| (j, lv, "level-header"))
                .or_else(|| upper_label(seg, i).map(|j| (j, Level::Unknown, "stream-label"))),
            Some(b'!') => bang_banner(seg, i).map(|j| (j, Level::Error, "comfy-banner")),
            Some(c) if c.is_ascii_lowercase() => {
                logger_name_level(seg, i).map(|(j, lv)| (j, lv, "elastic-logger"))
            }
            _ => None,
        }
        .or_else(|| cxx_what(seg, i).or_else(|| c_source_location(seg, i)))
        .or_else(|| crate::decorations::peeler().peel(seg, i))
        // A host prefix (`gpu-q-13: `) or `**` emphasis only opens a line before a report, or
        // (a host) where it names a machine the way launchers do, whatever follows it.
        .filter(|&(j, _, name)| {
            !OPENING_ONLY.contains(&name)
                || (before == 0
                    && (opens_report(&seg[j..]) || (name == "host" && machine_name(&seg[i..j]))))
        });
        if let Some((j, lv, name)) = step {
            note(name, &seg[i..j]);
            i = j;
            level = level.max(lv);
        }
        if i == before {
            return (i, level);
        }
    }
}

/// Decorations that only open a line, and only before what reports: behind anything else a
/// `word3: ` is a key, a tag or a version, and `**` emphasis.
const OPENING_ONLY: [&str; 2] = ["host", "markdown-bold"];

/// `worker-1: `, `gpu-q-13: `, `ip-172-31-16-253: `, `10.0.0.5: `, `localhost: `: a name that
/// ends in a number after `-` or `.` (a config key rarely does), as pdsh and clush put before
/// every line of a node, an indented continuation too.
fn machine_name(prefix: &[u8]) -> bool {
    let name = prefix.strip_suffix(b": ").unwrap_or(prefix);
    let digits = name.iter().rev().take_while(|b| b.is_ascii_digit()).count();
    name == b"localhost"
        || (digits > 0
            && digits < name.len()
            && matches!(name[name.len() - digits - 1], b'-' | b'.'))
}

fn skip_space_and_ansi(seg: &[u8], mut i: usize) -> usize {
    loop {
        match seg.get(i..) {
            Some([b' ' | b'\t', ..]) => i += 1,
            Some([0x1b, b'[', ..]) => {
                let mut j = i + 2;
                while j < seg.len() && (0x20..=0x3f).contains(&seg[j]) {
                    j += 1;
                }
                i = (j + 1).min(seg.len());
            }
            _ => return i,
        }
    }
}

/// `(WorkerDict pid=231421)`, `(EngineCore_DP0 pid=268)`, `(raylet)`, `(raylet, ip=..)`.
fn paren_prefix(seg: &[u8], i: usize) -> Option<usize> {
    let rest = &seg[i + 1..seg.len().min(i + 200)];
    let close = rest.iter().position(|&b| b == b')')?;
    let inner = &rest[..close];
    if inner.contains(&b'(') {
        return None;
    }
    let word_len = inner
        .iter()
        .take_while(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.' | b':'))
        .count();
    let ok = word_len > 0
        && (contains(inner, b"pid=")
            || word_len == inner.len()
            || inner[word_len..].starts_with(b", ip="));
    ok.then_some(i + 1 + close + 1)
}

/// `[rank3]:`, `[Rank 1]`, `[0]:`, glog `[E314 14:33:45.17 ProcessGroupNCCL.cpp:607]`,
/// `[E ProcessGroupNCCL.cpp:737]`, timestamps `[2026-09-13 16:06:07 TP0]`, Ray's
/// `[2026-01-20 08:13:25,391 E 2105 2105]`, source locations `[core.py:708]`, DeepSpeed's
/// `[INFO]`.
fn bracket_prefix(seg: &[u8], i: usize) -> Option<(usize, Level, &'static str)> {
    let rest = &seg[i + 1..seg.len().min(i + 100)];
    let close = rest.iter().position(|&b| b == b']')?;
    let inner = &rest[..close];
    let mut end = i + 1 + close + 1;
    if seg.get(end) == Some(&b':') {
        end += 1;
    }
    let first = *inner.first()?;
    let (level, name) = if let Some(r) = inner
        .strip_prefix(b"rank")
        .or_else(|| inner.strip_prefix(b"Rank "))
    {
        (!r.is_empty() && r.iter().all(u8::is_ascii_digit))
            .then_some((Level::Unknown, "torch-rank"))?
    } else if inner.iter().all(u8::is_ascii_digit) {
        (Level::Unknown, "index")
    } else if first.is_ascii_digit() {
        // A timestamp; Ray's C++ header carries a level letter as its third word.
        let third = inner.split(|&b| b == b' ').nth(2);
        if !inner[..inner.len().min(4)].iter().all(u8::is_ascii_digit) && !is_time_like(inner) {
            return None;
        }
        (
            third.map_or(Level::Unknown, glog_level),
            "timestamp-bracketed",
        )
    } else if matches!(first, b'I' | b'W' | b'E' | b'F')
        && inner
            .get(1)
            .is_none_or(|b| b.is_ascii_digit() || *b == b' ')
        && contains(inner, b":")
    {
        (glog_level(&inner[..1]), "glog-bracketed")
    } else if let Some(lv) = level_word(inner).filter(|&(n, _)| n == inner.len()) {
        (lv.1, "level-bracketed")
    } else if is_source_location(inner) {
        (Level::Unknown, "source-location")
    } else if let Some((j, lv)) = hydra_logger(seg, inner, i + 1 + close + 1) {
        return Some((j, lv, "hydra-logger"));
    } else {
        return None;
    };
    Some((end, level, name))
}

/// Hydra's job logging, `[%(asctime)s][%(name)s][%(levelname)s] - `: past the timestamp, a
/// logger name in brackets (`[genrl.logging_utils.global_defs]`, `[__main__]`) then its level
/// in brackets and the ` - ` separator. `inner` is the name's bracket content, `after` the
/// offset just past its `]`.
fn hydra_logger(seg: &[u8], inner: &[u8], after: usize) -> Option<(usize, Level)> {
    if inner.is_empty() || !inner.iter().all(|&c| is_word(c) || c == b'.') {
        return None;
    }
    let rest = seg.get(after..)?.strip_prefix(b"[")?;
    let (w, level) = level_word(rest)?;
    (rest.get(w) == Some(&b']')).then(|| (skip_separators(seg, after + 1 + w + 1), level))
}

fn glog_level(w: &[u8]) -> Level {
    match w {
        b"E" | b"F" => Level::Error,
        b"I" | b"W" => Level::Quiet,
        _ => Level::Unknown,
    }
}

/// `12:00:00`-style or `11-18`-style leading token.
fn is_time_like(b: &[u8]) -> bool {
    b.len() >= 5 && b[..2].iter().all(u8::is_ascii_digit) && matches!(b[2], b':' | b'-')
}

/// `file.py:708`, `real_accelerator.py:191:get_accelerator`.
fn is_source_location(b: &[u8]) -> bool {
    let Some(colon) = b.iter().position(|&c| c == b':') else {
        return false;
    };
    contains(&b[..colon], b".") && b.get(colon + 1).is_some_and(u8::is_ascii_digit)
}

/// `2025-03-14 14:23:09,117`, `2024-03-14T14:33:45.123Z`, `11-18 18:07:28`, optionally
/// followed by ` - `/` | `/`:` separators.
fn timestamp(seg: &[u8], i: usize) -> Option<usize> {
    let b = &seg[i..];
    let date = b.len() > 10 && b[..4].iter().all(u8::is_ascii_digit) && b[4] == b'-';
    if !(is_time_like(b) || date) {
        return None;
    }
    let mut j = i;
    let mut saw_colon = false;
    while let Some(&c) = seg.get(j) {
        match c {
            b'0'..=b'9' | b'-' | b'.' | b',' | b'T' | b'Z' | b'+' => j += 1,
            b':' => {
                saw_colon = true;
                j += 1;
            }
            b' ' if seg.get(j + 1).is_some_and(u8::is_ascii_digit) => j += 1,
            _ => break,
        }
    }
    if !saw_colon {
        return None;
    }
    Some(skip_separators(seg, j))
}

fn skip_separators(seg: &[u8], mut j: usize) -> usize {
    loop {
        match seg.get(j..) {
            Some([b' ' | b'\t', ..]) => j += 1,
            Some([b'-' | b'|' | b':', b' ', ..]) => j += 2,
            _ => return j,
        }
    }
}

/// `ERROR 11-18 18:07:28 engine.py:366] `, `ERROR 10-25 13:08:43 [core.py:708] `,
/// `ERROR:root:`, `WARNING:2025-03-14 ...:`, `E1122 12:00:00.123456  1234 file.cc:12] `,
/// `INFO worker.py:1654 -- `.
fn level_header(seg: &[u8], i: usize) -> Option<(usize, Level)> {
    let b = &seg[i..];
    if let Some((n, level)) = level_word(b) {
        let mut j = i + n;
        match seg.get(j) {
            Some(b':') => {
                // Python logging `LEVEL:logger:` (the logger name has no spaces).
                j += 1;
                let name = seg[j..]
                    .iter()
                    .take_while(|&&c| c != b':' && c != b' ')
                    .count();
                if seg.get(j + name) == Some(&b':') {
                    j += name + 1;
                }
            }
            Some(b' ' | b'\t') => {
                j = skip_separators(seg, j);
                if let Some(k) = timestamp(seg, j) {
                    j = k;
                }
                // `engine.py:366] ` or `worker.py:1654 -- `
                let tok = seg[j..].iter().take_while(|&&c| c != b' ').count();
                if is_source_location(
                    seg[j..j + tok]
                        .strip_suffix(b"]")
                        .unwrap_or(&seg[j..j + tok]),
                ) {
                    j = skip_separators(seg, j + tok);
                    if seg[j..].starts_with(b"-- ") {
                        j += 3;
                    }
                }
            }
            _ => return None,
        }
        return Some((j, level));
    }
    // Unbracketed glog: `E1122 12:00:00.123456  1234 file.cc:12] `.
    let lv = glog_level(&b[..1]);
    if lv != Level::Unknown && b.len() > 5 && b[1..5].iter().all(u8::is_ascii_digit) {
        let close = b[..b.len().min(80)].iter().position(|&c| c == b']')?;
        return Some((skip_separators(seg, i + close + 1), lv));
    }
    None
}

/// torch elastic's `torch.distributed.elastic.multiprocessing.api: [ERROR] `: a logger
/// name, then a bracketed level word.
fn logger_name_level(seg: &[u8], i: usize) -> Option<(usize, Level)> {
    let n = seg[i..]
        .iter()
        .take_while(|&&c| is_word(c) || c == b'.')
        .count();
    let j = i + n;
    if !seg[j..].starts_with(b": [") {
        return None;
    }
    let rest = &seg[j + 3..];
    let (w, level) = level_word(rest)?;
    (rest.get(w) == Some(&b']')).then(|| (skip_separators(seg, j + 3 + w + 1), level))
}

/// A level word at the start of `b` and its length.
pub(crate) fn level_word(b: &[u8]) -> Option<(usize, Level)> {
    const WORDS: [(&[u8], Level); 8] = [
        (b"ERROR", Level::Error),
        // llama.cpp's server and syslog's short form (`ERR [ process_batch_tokens] ...`).
        (b"ERR", Level::Error),
        (b"CRITICAL", Level::Error),
        (b"FATAL", Level::Error),
        (b"WARNING", Level::Quiet),
        (b"WARN", Level::Quiet),
        (b"INFO", Level::Quiet),
        (b"DEBUG", Level::Quiet),
    ];
    WORDS
        .iter()
        .find(|(w, _)| {
            b.starts_with(w) && b.get(w.len()).is_none_or(|c| !c.is_ascii_alphanumeric())
        })
        .map(|&(w, l)| (w.len(), l))
}

/// A launcher's upper-case stream label: `SUBPROCESS: `, `STDERR: ` (3 or more of `A-Z0-9_`,
/// then `: `). Level words are [`level_header`]'s.
fn upper_label(seg: &[u8], i: usize) -> Option<usize> {
    let n = seg[i..]
        .iter()
        .take_while(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || **c == b'_')
        .count();
    if n < 3 || !seg[i + n..].starts_with(b": ") {
        return None;
    }
    // An error enum reports itself (`CUDA_ERROR_OUT_OF_MEMORY: out of memory`,
    // `RESOURCE_EXHAUSTED: ...`): not a label.
    let word = &seg[i..i + n];
    let enum_like = [&b"ERROR"[..], b"EXHAUSTED", b"FAIL", b"MEMORY"]
        .iter()
        .any(|w| word.windows(w.len()).any(|x| x == *w));
    (!enum_like).then_some(i + n + 2)
}

/// ComfyUI-style banner `!!! Exception during processing !!! ` before the message it reports
/// (forks write it without the space before the closing marks: `processing!!! `).
fn bang_banner(seg: &[u8], i: usize) -> Option<usize> {
    let rest = seg.get(i..)?.strip_prefix(b"!!! ")?;
    let close = memchr::memmem::find(&rest[..rest.len().min(120)], b"!!!")?;
    Some(skip_space_and_ansi(seg, i + 4 + close + 3))
}

/// A logger's field in brackets that no other bracketed decoration names (MindIE's `[llm] `,
/// `[logging.py-348] : `): up to 48 bytes without a space, a `/` or a `:` (the kubectl, log
/// shipper and rank rows' fields), then a space or ` : `. In code, not
/// a regex row: the data row it replaced cost 8 % of the adversarial bench's scan.
fn bracketed_field(seg: &[u8], i: usize) -> Option<(usize, Level, &'static str)> {
    let inner = seg.get(i + 1..)?;
    let n = inner
        .iter()
        .take(49)
        .take_while(|&&c| c != b']' && !c.is_ascii_whitespace() && c != b'/' && c != b':')
        .count();
    if n == 0 || n > 48 || inner.get(n) != Some(&b']') {
        return None;
    }
    // A level (`[Error] `, `[E] `) is the level rows' to read.
    if crate::decorations::level_of(&inner[..n]) != Level::Unknown {
        return None;
    }
    // Only a field a space ends: `[1,0]<stderr>:` and `[default3]:` are other decorations'.
    let mut j = i + 1 + n + 1;
    if seg.get(j) != Some(&b' ') {
        return None;
    }
    j += 1;
    if seg[j..].starts_with(b": ") {
        j += 2;
    }
    Some((j, Level::Unknown, "bracketed-field"))
}

/// libstdc++'s terminate handler: `what():  ` before the uncaught exception's message.
fn cxx_what(seg: &[u8], i: usize) -> Option<(usize, Level, &'static str)> {
    let rest = seg.get(i..)?.strip_prefix(b"what(): ")?;
    let sp = rest.iter().take_while(|&&c| c == b' ').count();
    Some((i + 8 + sp, Level::Unknown, "cxx-what"))
}

/// dmlc-core's LOG (MXNet, XGBoost, TVM, DGL): a C++ file's path and line before the message
/// (`src/storage/./pooled_storage_manager.h:111: `); a path with a `/`, a C or C++ source or
/// header (not CUDA's `.cu`: a kernel's assert names its function after it).
fn c_source_location(seg: &[u8], i: usize) -> Option<(usize, Level, &'static str)> {
    let rest = seg.get(i..)?;
    let n = rest
        .iter()
        .take_while(|&&c| is_word(c) || matches!(c, b'.' | b'/' | b'\\' | b'-'))
        .count();
    let path = &rest[..n];
    let slash = path.iter().position(|&c| c == b'/')?;
    let dot = path.iter().rposition(|&c| c == b'.')?;
    const EXTS: [&[u8]; 7] = [b"h", b"hh", b"hpp", b"c", b"cc", b"cpp", b"cxx"];
    if dot <= slash + 1 || !EXTS.contains(&&path[dot + 1..]) {
        return None;
    }
    let after = rest[n..].strip_prefix(b":")?;
    let digits = after.iter().take_while(|c| c.is_ascii_digit()).count();
    (digits > 0 && after[digits..].starts_with(b": ")).then_some((
        i + n + 1 + digits + 2,
        Level::Unknown,
        "c-source-location",
    ))
}

/// `srun -l`'s task label: `3: ` (only at the very start of the line).
fn srun_label(seg: &[u8], i: usize) -> Option<usize> {
    let n = seg[i..].iter().take_while(|b| b.is_ascii_digit()).count();
    (n > 0 && n <= 5 && seg[i + n..].starts_with(b": ")).then_some(i + n + 2)
}

/// docker-compose's `vllm-1  | `.
fn compose_prefix(seg: &[u8], i: usize) -> Option<usize> {
    let n = seg[i..]
        .iter()
        .take_while(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
        .count();
    let sp = seg[i + n..].iter().take_while(|&&b| b == b' ').count();
    (n > 0 && sp > 0 && seg[i + n + sp..].starts_with(b"| ")).then_some(i + n + sp + 2)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn body(s: &str) -> (&str, Level) {
        let (i, l) = strip_prefixes(s.as_bytes());
        (&s[i..], l)
    }

    #[test]
    fn strips_tool_prefixes() {
        let cases = [
            (
                "(WorkerDict pid=1) [rank3]: torch.OutOfMemoryError: x",
                "torch.OutOfMemoryError: x",
                Level::Unknown,
            ),
            (
                "[rank1]:[E314 14:33:45.172185860 ProcessGroupNCCL.cpp:607] [Rank 1] Watchdog",
                "Watchdog",
                Level::Error,
            ),
            (
                "[E ProcessGroupNCCL.cpp:737] [Rank 1] Watchdog",
                "Watchdog",
                Level::Error,
            ),
            (
                "!!! Exception during processing !!! HIP out of memory.",
                "HIP out of memory.",
                Level::Error,
            ),
            (
                "!!! Exception during processing!!! CUDA out of memory.",
                "CUDA out of memory.",
                Level::Error,
            ),
            (
                "vllm-1  | ERROR 11-18 18:07:28 engine.py:366] ValueError: No",
                "ValueError: No",
                Level::Error,
            ),
            (
                "(EngineCore_DP0 pid=268) ERROR 10-21 00:35:03 [core.py:708] ValueError: To",
                "ValueError: To",
                Level::Error,
            ),
            (
                "[2026-09-13 16:06:07] KV cache pool",
                "KV cache pool",
                Level::Unknown,
            ),
            (
                "[2025-07-02 07:41:59 DP0 TP0] max_total",
                "max_total",
                Level::Unknown,
            ),
            (
                "(raylet) [2026-01-20 08:13:25,391 E 2105 2105] (raylet) node_manager.cc:3099: 1 W",
                "node_manager.cc:3099: 1 W",
                Level::Error,
            ),
            (
                "E1122 12:00:00.123456  1234 file.cc:12] boom",
                "boom",
                Level::Error,
            ),
            (
                "ERROR:torch.distributed.elastic.multiprocessing.api:failed (exitcode: -9)",
                "failed (exitcode: -9)",
                Level::Error,
            ),
            (
                "2025-03-14 14:23:09,117\tINFO worker.py:1654 -- Connecting",
                "Connecting",
                Level::Quiet,
            ),
            (
                "  3: torch.OutOfMemoryError: x",
                "torch.OutOfMemoryError: x",
                Level::Unknown,
            ),
            (
                "\x1b[36m(WorkerDict pid=2)\x1b[0m \x1b[31mRuntimeError: y",
                "RuntimeError: y",
                Level::Unknown,
            ),
            (
                "WARNING 05-09 00:49:33 scheduler.py:1057 Sequence group",
                "Sequence group",
                Level::Quiet,
            ),
            (
                "[2024-11-02 19:58:41,307] torch.distributed.elastic.multiprocessing.api: [ERROR] failed",
                "failed",
                Level::Error,
            ),
        ];
        for (s, want, lv) in cases {
            assert_eq!(body(s), (want, lv), "{s:?}");
        }
    }
}
