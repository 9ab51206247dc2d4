//! The scanning engine: candidate search over whole regions, per-line confirmation,
//! traceback following, and the bounded carry for partial / over-long lines.

use memchr::{memchr, memchr_iter, memrchr};

use super::engine::{Engine, NextHits, engine};
use super::memory::{self, MemoryFacts, Phase};
use super::normalise::Level;
use super::position::{self, Position};
use super::rules::{Action, Kind, Mask, SLOTS, Slot, rules_in};
use super::terminal::{self, ExcKind, Terminal};
use super::text::evidence;
use super::{Certainty, Evidence, FailureClass, Verdict};

/// Longest partial line kept between `feed` calls; longer lines are scanned in pieces.
pub const LINE_CAP: usize = 64 * 1024;
/// Bytes of an over-long line kept (and re-scanned) across a piece boundary, so that a
/// signature straddling the boundary is still seen whole.
const OVERLAP: usize = 4 * 1024;
/// A traceback is followed for at most this many lines looking for its exception line.
const TB_MAX_LINES: u32 = 2000;
/// A memory failure's words outside a reporting position decide a failed job only this close to
/// the end of its log (where a process that died of it stops), see `State::loose_reading`.
const LOOSE_TAIL: u64 = 10;
/// How many of the last segments whose memory words did not decide are kept for that reading.
const LOOSE_KEPT: usize = 4;

/// A segment whose memory rules did not decide (they are judged again, loosely, only when a
/// verdict is asked for: most such lines are trap lines, and nearly all are far from the end).
#[derive(Debug, Clone)]
struct Loose {
    line: u64,
    seg: Vec<u8>,
    /// The memory message rules the segment's needles selected.
    mask: Mask,
    pos: Position,
    truncated: bool,
}

/// Until its first `File "..."` frame, a traceback header is followed this many lines.
const TB_MAX_LINES_BEFORE_FRAME: u32 = 64;
/// Longest line prefix (Ray `(Actor pid=..)`, vLLM logger header) remembered for a traceback.
const TB_MAX_PREFIX: usize = 512;

/// A traceback being followed to its final exception line.
#[derive(Debug, Clone)]
struct Traceback {
    /// What preceded `Traceback` on the header segment.
    header_prefix: Vec<u8>,
    /// The per-line prefix of this traceback's frames, once the first frame is seen.
    prefix: Option<Vec<u8>>,
    /// Lines looked at so far.
    seen: u32,
    /// Stage and step named by the frames so far (for a memory failure's phase).
    phase: Phase,
    /// Python swallowed this exception (`Exception ignored in ...`): it ends nothing.
    ignored: bool,
    /// The line the previous traceback ended on (0: none): a memory failure read after it
    /// and before this one belongs to this one.
    after: u64,
}

/// Everything the scanner remembers about complete lines: bounded and cheap to clone.
#[derive(Debug, Clone, Default)]
pub(crate) struct State {
    /// Number of `\n` consumed so far; the next line is `lines + 1`.
    lines: u64,
    /// First hit per precedence slot.
    hits: [Option<Evidence>; SLOTS],
    /// Memory numbers of the hit in the same slot (memory slots only).
    memory: [Option<MemoryFacts>; SLOTS],
    /// Line and phase of the last traceback that reached its exception line: a memory
    /// failure's exception line ends the traceback before the failure rule sees it.
    last_tb: Option<(u64, Phase)>,
    /// Rules whose slot already holds its earliest hit (bitmask over `RULES`).
    done: Mask,
    tb: Option<Traceback>,
    /// The last exception line that ended a followed traceback (the process's last words,
    /// unless teardown noise of an earlier failure).
    terminal: Option<Terminal>,
    /// Line of the last `Exception ignored in` / atexit / logging-error report.
    ignored_at: Option<u64>,
    /// Line of the first runner teardown or non-kill exit status (voids a later exit 137).
    teardown_at: Option<u64>,
    /// A crash of the process was named (one of [`crate::rules::CRASHES`]).
    crashed: bool,
    /// The last memory failure's words seen outside a reporting position (not quoted, not a
    /// mention, not on a warning line), for a failed job's reading.
    loose: [Option<Loose>; LOOSE_KEPT],
    /// The slot of `loose` written last.
    loose_at: usize,
}

/// `set -x` echo: one or more `+` then a space at the very start of the line.
pub(crate) fn is_set_x_echo(line: &[u8]) -> bool {
    let n = line.iter().take_while(|&&b| b == b'+').count();
    n > 0 && line.get(n) == Some(&b' ')
}

/// A `#` comment line (yaml / shell / python source dumped into the log); vLLM's own `# GPU
/// blocks: N` report is not one.
fn is_comment(seg: &[u8]) -> bool {
    let Some(i) = seg.iter().position(|b| !b.is_ascii_whitespace()) else {
        return false;
    };
    seg[i] == b'#'
        && !position::is_block_count(&seg[i..])
        && !position::is_hash_decoration(&seg[i..])
}

fn strip_cr(mut l: &[u8]) -> &[u8] {
    while let [rest @ .., b'\r'] = l {
        l = rest;
    }
    l
}

fn count_newlines(b: &[u8]) -> u64 {
    memchr_iter(b'\n', b).count() as u64
}

impl State {
    /// The verdict by precedence over the recorded hits.
    pub(crate) fn verdict(&self) -> Verdict {
        // A different fatal exception that ends the process after a memory failure was
        // reported: the memory failure was survived (caught, retried) or is not the cause.
        let superseding = self.terminal.as_ref().filter(|t| t.kind == ExcKind::Other);
        for slot in Slot::ALL {
            // A silent death (a SIGKILL, an exit 137, a restarted kernel) is the OOM killer's
            // only when the log names no crash of the process anywhere (see
            // [`crate::rules::CRASHES`]), wherever it stands: Colab's runtime log lists its
            // newest line first.
            if slot == Slot::HostOomWeak && self.crashed {
                continue;
            }
            if let Some(ev) = &self.hits[slot as usize] {
                if let Some(t) = superseding
                    && slot.is_memory()
                    && t.evidence.line > ev.line
                {
                    let ev = self.hits[Slot::Error as usize]
                        .clone()
                        .unwrap_or_else(|| t.evidence.clone());
                    return Verdict {
                        class: FailureClass::Error,
                        evidence: Some(ev),
                        memory: None,
                        rank: Slot::Error as u8,
                        certainty: Certainty::Certain,
                        if_failed: self.loose_reading(t.evidence.line),
                    };
                }
                // A generic wrapper decides only for want of better: the process's last
                // words, when they are a specific exception, are the better evidence.
                let ev = match superseding {
                    Some(t) if slot == Slot::ErrorWeak => &t.evidence,
                    _ => ev,
                };
                if slot.class() == FailureClass::GpuOom
                    && self.memory[slot as usize]
                        .as_ref()
                        .is_some_and(MemoryFacts::request_is_absurd)
                {
                    // A request many times the card's capacity is a size computed wrong (a
                    // bug), which no smaller batch answers.
                    return Verdict {
                        class: FailureClass::Error,
                        evidence: Some(ev.clone()),
                        memory: self.memory[slot as usize].clone(),
                        rank: Slot::Error as u8,
                        certainty: Certainty::Certain,
                        if_failed: None,
                    };
                }
                let if_failed = if slot == Slot::ErrorWeak {
                    self.loose_reading(superseding.map_or(0, |t| t.evidence.line))
                } else {
                    None
                };
                return Verdict {
                    class: slot.class(),
                    evidence: Some(ev.clone()),
                    memory: self.memory[slot as usize].clone(),
                    rank: slot as u8,
                    certainty: Certainty::Certain,
                    if_failed,
                };
            }
        }
        Verdict {
            class: FailureClass::None,
            evidence: None,
            memory: None,
            rank: u8::MAX,
            certainty: Certainty::Certain,
            if_failed: self.loose_reading(0),
        }
    }

    /// The reading of a failed job from the last memory failure's words outside a reporting
    /// position, when they stand within [`LOOSE_TAIL`] lines of the end and after `after` (the
    /// line of a different exception that ended the process, which would supersede them).
    fn loose_reading(&self, after: u64) -> Option<Box<Verdict>> {
        let eng = engine();
        // Newest first.
        let mut kept: Vec<&Loose> = self.loose.iter().flatten().collect();
        kept.sort_by_key(|l| std::cmp::Reverse(l.line));
        kept.into_iter()
            .take_while(|l| l.line > after && self.lines.saturating_sub(l.line) <= LOOSE_TAIL)
            .find_map(|l| self.judge_loose(eng, l))
    }

    /// A kept segment's loose verdict: the first of its memory rules whose words stand there
    /// outside quotes.
    fn judge_loose(&self, eng: &Engine, l: &Loose) -> Option<Box<Verdict>> {
        let seg = l.seg.as_slice();
        eng.rules
            .iter()
            .enumerate()
            .filter(|(i, _)| l.mask & (1 << i) != 0)
            .find_map(|(_, cr)| {
                let Action::Hit(slot) = cr.rule.action else {
                    return None;
                };
                if !cr.may_match(seg) {
                    return None;
                }
                // A lead signature (an exception class, the shell's `Killed`) reads only where
                // a report starts, here too: srun's `task 1: Killed` of a rank it stopped is
                // not the shell's report of a job the kernel killed.
                let m = if cr.rule.kind == Kind::Lead {
                    let lead = l.pos.lead(seg);
                    let m = cr.anchored().find(&seg[lead..])?;
                    lead + m.start()..lead + m.end()
                } else {
                    cr.re().find(seg)?.range()
                };
                if l.pos.quoted(seg, m.start)
                    || cr.unless_matches(seg)
                    || position::has_advice_word(&seg[l.pos.body..m.start.max(l.pos.body)])
                {
                    return None;
                }
                let memory = self.memory_facts(seg, l.line);
                if memory.as_ref().is_some_and(MemoryFacts::request_is_absurd) {
                    return None;
                }
                let mut ev = evidence(seg, m.start, l.line, l.truncated);
                ev.rule = Some(cr.rule.name.to_string());
                Some(Box::new(Verdict {
                    class: slot.class(),
                    evidence: Some(ev),
                    memory,
                    rank: slot as u8,
                    certainty: Certainty::Likely,
                    if_failed: None,
                }))
            })
    }

    /// Scan `buf`, which holds only complete lines (it ends with `\n`), starting at
    /// line `self.lines + 1`.
    pub(crate) fn scan_region(&mut self, eng: &Engine, buf: &[u8]) {
        debug_assert_eq!(buf.last(), Some(&b'\n'));
        let mut pos = 0;
        let mut line = self.lines + 1;
        // The next candidate needle at or after `pos` (cached across lines).
        let mut next: Option<(usize, usize, Mask)> = None;
        let mut cache = NextHits::default();
        while pos < buf.len() {
            if next.is_none_or(|(s, ..)| s < pos) {
                next = eng.find_cached(buf, pos, &mut cache);
            }
            if self.tb.is_some() {
                // Following a traceback: walk line by line (tracebacks are short).
                let end = pos + memchr(b'\n', &buf[pos..]).expect("region ends with \\n");
                let l = &buf[pos..end];
                self.tb_step(eng, l, line);
                if next.is_some_and(|(s, ..)| s < end) {
                    let hits = Hits::Region {
                        buf,
                        at: pos,
                        cache: &mut cache,
                    };
                    self.scan_line(eng, l, hits, line, true, false, false);
                }
                pos = end + 1;
                line += 1;
                continue;
            }
            let Some((s, ..)) = next else {
                break;
            };
            let start = memrchr(b'\n', &buf[pos..s]).map_or(pos, |i| pos + i + 1);
            line += count_newlines(&buf[pos..start]);
            let end = s + memchr(b'\n', &buf[s..]).expect("region ends with \\n");
            let hits = Hits::Region {
                buf,
                at: start,
                cache: &mut cache,
            };
            self.scan_line(eng, &buf[start..end], hits, line, true, false, false);
            pos = end + 1;
            line += 1;
        }
        if pos < buf.len() {
            line += count_newlines(&buf[pos..]);
        }
        self.lines = line - 1;
    }

    /// Confirm the candidates in one line (or one piece of an over-long line).
    ///
    /// `hits`: where the line's needles come from (see [`Hits`]).
    /// `at_start`: `l[0]` is the true start of the line. `truncated`: bytes before `l[0]`
    /// were dropped. `set_x`: the (dropped) start of this line was a `set -x` echo.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn scan_line(
        &mut self,
        eng: &Engine,
        l: &[u8],
        mut hits: Hits,
        line: u64,
        at_start: bool,
        truncated: bool,
        set_x: bool,
    ) {
        let skip = if at_start { is_set_x_echo(l) } else { set_x };
        if skip {
            return;
        }
        // Group needles by the `\r`-segment they fall in; confirm each segment once.
        // A needle inside quotes, or on a mention line, selects no rule; on a warning /
        // info-level line no message rule (most trap lines end here, before any regex).
        let mut seg: Option<(usize, usize, Option<Position>)> = None;
        let mut mask: Mask = 0;
        let mut from = 0;
        while let Some((ms, me, needle)) = hits.next(eng, l, from) {
            from = ms + 1;
            let a = memrchr(b'\r', &l[..ms]).map_or(0, |i| i + 1);
            if seg.as_ref().is_none_or(|&(sa, ..)| sa != a) {
                if let Some((sa, sb, Some(pos))) = seg {
                    self.confirm(eng, &l[sa..sb], &pos, mask, line, truncated && sa == 0);
                }
                let b = memchr(b'\r', &l[me..]).map_or(l.len(), |i| me + i);
                seg = Some((a, b, None));
                mask = 0;
            }
            let Some((sa, sb, pos)) = seg.as_mut() else {
                unreachable!("segment set above");
            };
            if needle & (!self.done | eng.claim_rules) == 0 {
                continue; // every rule this needle could fire already has its earliest hit
            }
            let start_known = *sa > 0 || at_start;
            let pos = pos.get_or_insert_with(|| {
                if start_known {
                    Position::of(&l[*sa..*sb])
                } else {
                    Position::unknown_start()
                }
            });
            if pos.mention {
                // Nothing in a mention segment decides: look past it.
                from = *sb;
                continue;
            }
            if pos.quoted(&l[*sa..*sb], ms - *sa) {
                // A needle overlapping this one is inside the same quotes.
                from = me;
                continue;
            }
            mask |= if pos.level == Level::Quiet {
                needle & !eng.message_rules
            } else {
                needle
            };
        }
        if let Some((sa, sb, Some(pos))) = seg {
            self.confirm(eng, &l[sa..sb], &pos, mask, line, truncated && sa == 0);
        }
    }

    /// Run the precise rules selected by `mask` on one segment and record hits.
    fn confirm(
        &mut self,
        eng: &Engine,
        seg: &[u8],
        pos: &Position,
        mask: Mask,
        line: u64,
        truncated: bool,
    ) {
        let todo = mask & !self.done;
        if todo == 0 {
            return; // every rule this segment could fire already has its earliest hit
        }
        // Traps: config dumps and (yaml / shell) comment lines quote knob names,
        // experiment names and advice, never failures.
        if eng.server_args.find(seg).is_some()
            || (pos.start_known && (is_comment(seg) || eng.config_dump.is_match(seg)))
        {
            return;
        }
        // A claiming rule that matches is the only thing this segment says (even when its
        // own slot is already filled).
        let claiming = rules_in(mask & eng.claim_rules).map(|i| &eng.rules[i]);
        for cr in claiming.filter(|cr| cr.may_match(seg)) {
            if let Some(m) = cr.re().find(seg) {
                if pos.allows(seg, cr.rule.kind, m.start()) {
                    self.record(
                        eng,
                        cr.rule.name,
                        cr.rule.action,
                        seg,
                        m.start(),
                        line,
                        truncated,
                    );
                }
                return;
            }
        }
        // Where a message or lead rule may only match at the start of the body.
        let lead = pos.lead_only().then(|| pos.lead(seg));
        let mut loose: Mask = 0;
        for i in rules_in(todo) {
            let cr = &eng.rules[i];
            // The rule's literal check, once (a search asks it first, a loose reading after).
            let mut may = None;
            let at = match (cr.rule.kind, lead) {
                (Kind::Message | Kind::Lead, Some(lead)) => {
                    cr.anchored().find(&seg[lead..]).map(|m| lead + m.start())
                }
                (Kind::Lead, None) if pos.start_known => {
                    let lead = pos.lead(seg);
                    cr.anchored().find(&seg[lead..]).map(|m| lead + m.start())
                }
                // A search through the segment: first the rule's cheap literal check.
                _ if !*may.insert(cr.may_match(seg)) => None,
                _ => cr.re().find(seg).map(|m| m.start()),
            };
            let decided =
                at.filter(|&at| !cr.unless_matches(seg) && pos.allows(seg, cr.rule.kind, at));
            match decided {
                Some(at) => {
                    self.record(eng, cr.rule.name, cr.rule.action, seg, at, line, truncated)
                }
                // Only a segment that holds one of the rule's own needles (not just an anchor
                // the prefilter shares with others) is worth keeping for a failed job's reading.
                None if cr.rule.kind != Kind::Format
                    && may.unwrap_or_else(|| cr.may_match(seg)) =>
                {
                    loose |= 1 << i
                }
                None => {}
            }
        }
        if loose & eng.memory_rules != 0 && pos.level != Level::Quiet {
            self.keep_loose(seg, loose & eng.memory_rules, pos, line, truncated);
        }
    }

    /// Keep a segment whose memory message rules did not decide, for a failed job's reading
    /// (reusing the oldest kept segment's buffer).
    fn keep_loose(&mut self, seg: &[u8], mask: Mask, pos: &Position, line: u64, truncated: bool) {
        self.loose_at = (self.loose_at + 1) % LOOSE_KEPT;
        let slot = &mut self.loose[self.loose_at];
        let mut buf = slot.take().map(|l| l.seg).unwrap_or_default();
        buf.clear();
        buf.extend_from_slice(seg);
        *slot = Some(Loose {
            line,
            seg: buf,
            mask,
            pos: *pos,
            truncated,
        });
    }

    #[allow(clippy::too_many_arguments)]
    fn record(
        &mut self,
        eng: &Engine,
        rule: &'static str,
        action: Action,
        seg: &[u8],
        at: usize,
        line: u64,
        truncated: bool,
    ) {
        match action {
            Action::Hit(_)
                if rule == crate::rules::TEARDOWN_VOIDS
                    && self.teardown_at.is_some_and(|l| l < line) => {}
            Action::Hit(slot) => {
                self.crashed |= crate::rules::CRASHES.contains(&rule);
                let h = &mut self.hits[slot as usize];
                if h.is_none() {
                    let mut ev = evidence(seg, at, line, truncated);
                    ev.rule = Some(rule.to_string());
                    *h = Some(ev);
                    if slot.is_memory() {
                        self.memory[slot as usize] = self.memory_facts(seg, line);
                    }
                    self.done |= eng.slot_rules[slot as usize];
                }
            }
            Action::TracebackStart => {
                self.tb = Some(Traceback {
                    header_prefix: seg[..at.min(TB_MAX_PREFIX)].to_vec(),
                    prefix: None,
                    seen: 0,
                    phase: Phase::default(),
                    ignored: self.ignored_at.is_some_and(|l| l + 1 >= line),
                    after: self.last_tb.map_or(0, |(l, _)| l),
                });
            }
            Action::IgnoredTracebackNext => self.ignored_at = Some(line),
            Action::Teardown => {
                self.teardown_at.get_or_insert(line);
            }
        }
    }

    /// Feed one complete line (after a traceback header) to the traceback follower.
    pub(crate) fn tb_step(&mut self, eng: &Engine, l: &[u8], line: u64) {
        let Some(tb) = self.tb.as_mut() else {
            return;
        };
        tb.seen += 1;
        if tb.seen > TB_MAX_LINES {
            self.tb = None;
            return;
        }
        let l = strip_cr(l);
        if tb.prefix.is_none()
            && tb.seen == 1
            && l.strip_prefix(tb.header_prefix.as_slice())
                .is_some_and(|rest| eng.exception_line.is_match(rest))
        {
            // A traceback printed without frames (`Traceback (most recent call last):` then
            // `MemoryError: bad allocation` at once): its exception line ends it.
            tb.prefix = Some(tb.header_prefix.clone());
        }
        let Some(prefix) = &tb.prefix else {
            // Learn the frame prefix from the first `<prefix>  File "` line whose prefix
            // is consistent with the header's (same Ray actor / logger, or none at all).
            if let Some(i) = eng.frame.find(l)
                && i >= 2
                && &l[i - 2..i] == b"  "
                && tb.header_prefix.starts_with(&l[..i - 2])
            {
                tb.prefix = Some(l[..i - 2].to_vec());
                tb.phase.observe(&l[i..]);
            } else if tb.seen > TB_MAX_LINES_BEFORE_FRAME {
                self.tb = None;
            }
            return;
        };
        let Some(rest) = l.strip_prefix(prefix.as_slice()) else {
            return; // interleaved output of another process
        };
        match rest.first() {
            // Frame, source line, caret markers: only the frames and source lines name a
            // phase, and only memory failures ask for it (cheap substring checks).
            None | Some(b' ' | b'\t') => tb.phase.observe(rest),
            Some(_) => {
                if eng.exception_line.is_match(rest) {
                    let at = prefix.len();
                    let ignored = tb.ignored;
                    let phase = tb.phase;
                    let after = tb.after;
                    // Ray appends the remote traceback to `RayTaskError(X): ...`; its last
                    // line is the worker's own exception: keep following.
                    let wrapper = terminal::is_ray_task_error(rest);
                    if wrapper {
                        tb.seen = 0;
                    } else {
                        self.tb = None;
                    }
                    self.last_tb = Some((line, phase));
                    // A memory failure read before its traceback (Ray prints the worker's
                    // `(WorkerDict pid=…) torch.OutOfMemoryError: …` first, then the driver's
                    // traceback down to the same error) takes the phase this one names.
                    // Only the slots of the same kind (device or host memory), and only a
                    // line read after the previous traceback ended.
                    let same_kind: &[Slot] = match terminal::memory_class_slot(rest) {
                        Some(Slot::HostOom) => &[Slot::HostOom],
                        Some(_) => &[Slot::GpuOom, Slot::GpuOomWeak],
                        None => &[],
                    };
                    if !phase.is_empty() {
                        for &slot in same_kind {
                            let i = slot as usize;
                            let read_since = self.hits[i].as_ref().is_some_and(|h| h.line > after);
                            if let (true, Some(facts)) = (read_since, self.memory[i].as_mut())
                                && facts.stage.is_none()
                                && facts.step.is_none()
                            {
                                facts.stage = phase.stage;
                                facts.step = phase.step;
                            }
                        }
                    }
                    if !ignored {
                        let kind = terminal::kind_of(eng, l, rest);
                        let mut evidence = evidence(l, at, line, false);
                        evidence.rule = Some("python-traceback".to_string());
                        self.terminal = Some(Terminal { kind, evidence });
                    }
                    if !ignored {
                        // A traceback that ends in a memory exception class with no message
                        // (`torch.cuda.OutOfMemoryError`, `MemoryError`): the class decides.
                        // Known here, where it costs no needle.
                        // `MemoryError: std::bad_alloc: RMM failure at: ...`: a host class
                        // around a device allocator's report is the device's (its rule hits).
                        if let Some(slot) = terminal::memory_class_slot(rest)
                            && !(slot == Slot::HostOom && eng.matches_any(l, eng.device_rules))
                        {
                            self.record(
                                eng,
                                "python-traceback-memory-class",
                                Action::Hit(slot),
                                l,
                                at,
                                line,
                                false,
                            );
                        }
                        self.record(
                            eng,
                            "python-traceback",
                            Action::Hit(Slot::ErrorWeak),
                            l,
                            at,
                            line,
                            false,
                        );
                    }
                } else {
                    // "During handling of the above exception..." or something we do not
                    // understand: stop; a chained traceback restarts at its own header.
                    self.tb = None;
                }
            }
        }
    }

    /// The memory numbers of a memory failure's line, with the phase the traceback it ends
    /// (or is inside of) names, or a Ray task name on the line itself.
    fn memory_facts(&self, seg: &[u8], line: u64) -> Option<MemoryFacts> {
        let mut facts = memory::read(seg);
        let phase = match (&self.tb, self.last_tb) {
            (Some(tb), _) => tb.phase,
            (None, Some((l, phase))) if l == line => phase,
            _ => Phase::default(),
        };
        let mut phase = phase;
        if phase.is_empty() {
            phase.observe(seg);
        }
        facts.stage = phase.stage;
        facts.step = phase.step;
        (!facts.is_empty()).then_some(facts)
    }

    pub(crate) fn tb_active(&self) -> bool {
        self.tb.is_some()
    }

    pub(crate) fn next_line(&self) -> u64 {
        self.lines + 1
    }

    pub(crate) fn end_line(&mut self) {
        self.lines += 1;
    }
}

/// Bytes of the log's last complete lines kept for [`headerless_traceback_end`].
const TAIL_KEEP: usize = 8 * 1024;
/// How far above its exception line a header-less traceback's last frame may stand (its
/// source line and `^^^` markers between).
const TAIL_FRAME_GAP: usize = 4;

/// A traceback pasted from its frames, its `Traceback (most recent call last):` header cut
/// (an issue's excerpt, `ray job logs` keeping a tail): the log's last line is an exception
/// line (`FileNotFoundError: [Errno 2] ...`, `RayTaskError(ValueError): ...`) a few lines under
/// a `File "..."` frame of the same prefix, with only the frame's source and markers between.
/// The process ended with it; read when no line decided anything else.
fn headerless_traceback_end(eng: &Engine, tail: &[u8], last_line: u64) -> Option<Evidence> {
    let whole = tail.strip_suffix(b"\n").unwrap_or(tail);
    let lines: Vec<&[u8]> = whole.split(|&b| b == b'\n').map(strip_cr).collect();
    let blank = |l: &[u8]| l.iter().all(u8::is_ascii_whitespace);
    let end = lines.iter().rposition(|l| !blank(l))?;
    let l = lines[end];
    let (body, _) = super::normalise::strip_prefixes(l);
    let prefix = &l[..body];
    if !eng.exception_line.is_match(&l[body..]) {
        return None;
    }
    // Between the exception line and its frame: the frame's source line and markers only
    // (indented under the same prefix).
    for k in (end.saturating_sub(TAIL_FRAME_GAP + 1)..end).rev() {
        let above = lines[k];
        let rest = above.strip_prefix(prefix)?;
        if let Some(i) = eng.frame.find(rest) {
            let frame = i >= 2 && rest[..i].iter().all(|&b| b == b' ');
            if !frame {
                return None;
            }
            let line = last_line - (lines.len() - 1 - end) as u64;
            let mut ev = evidence(l, body, line, false);
            ev.rule = Some("python-traceback-tail".to_string());
            return Some(ev);
        }
        if !rest.first().is_some_and(|b| *b == b' ' || *b == b'\t') {
            return None;
        }
    }
    None
}

/// The incremental scanner behind [`super::Scanner`].
#[derive(Debug, Clone, Default)]
pub(crate) struct Core {
    state: State,
    /// The last complete lines (at most about [`TAIL_KEEP`] bytes), for a traceback whose
    /// header the log does not hold.
    tail: Vec<u8>,
    /// The current partial line: from its start, or (when `overflowed`) a tail window.
    carry: Vec<u8>,
    /// The current line outgrew [`LINE_CAP`]; its start has been scanned and dropped.
    overflowed: bool,
    /// The current (overflowed) line started as a `set -x` echo.
    set_x: bool,
}

impl Core {
    pub(crate) fn feed(&mut self, chunk: &[u8]) {
        let eng = engine();
        let mut rest = chunk;
        if !self.carry.is_empty() || self.overflowed {
            match memchr(b'\n', rest) {
                None => {
                    self.push_partial(eng, rest);
                    return;
                }
                Some(i) => {
                    self.push_partial(eng, &rest[..i]);
                    Self::finish_line(
                        &mut self.state,
                        eng,
                        &self.carry,
                        self.overflowed,
                        self.set_x,
                    );
                    let carry = std::mem::take(&mut self.carry);
                    self.keep_tail(&carry);
                    self.keep_tail(b"\n");
                    self.carry = carry;
                    self.carry.clear();
                    self.overflowed = false;
                    rest = &rest[i + 1..];
                }
            }
        }
        match memrchr(b'\n', rest) {
            None => self.push_partial(eng, rest),
            Some(j) => {
                self.state.scan_region(eng, &rest[..=j]);
                self.keep_tail(&rest[..=j]);
                self.push_partial(eng, &rest[j + 1..]);
            }
        }
    }

    /// Keep the last [`TAIL_KEEP`] bytes of the complete lines.
    fn keep_tail(&mut self, bytes: &[u8]) {
        if bytes.len() >= TAIL_KEEP {
            self.tail.clear();
            self.tail
                .extend_from_slice(&bytes[bytes.len() - TAIL_KEEP..]);
            return;
        }
        self.tail.extend_from_slice(bytes);
        if self.tail.len() > 2 * TAIL_KEEP {
            self.tail.drain(..self.tail.len() - TAIL_KEEP);
        }
    }

    /// Verdict, counting the trailing partial line as complete.
    pub(crate) fn verdict(&self) -> Verdict {
        let eng = engine();
        let (verdict, last_line, partial) = if self.carry.is_empty() && !self.overflowed {
            (self.state.verdict(), self.state.lines, None)
        } else {
            let mut st = self.state.clone();
            Self::finish_line(&mut st, eng, &self.carry, self.overflowed, self.set_x);
            (st.verdict(), st.lines, Some(&self.carry))
        };
        if verdict.class != FailureClass::None {
            return verdict;
        }
        let tail: std::borrow::Cow<[u8]> = match partial {
            None => (&self.tail[..]).into(),
            Some(carry) => [&self.tail[..], carry].concat().into(),
        };
        match headerless_traceback_end(eng, &tail, last_line) {
            Some(evidence) => Verdict {
                class: FailureClass::Error,
                evidence: Some(evidence),
                memory: None,
                rank: Slot::ErrorWeak as u8,
                certainty: Certainty::Certain,
                if_failed: verdict.if_failed,
            },
            None => verdict,
        }
    }

    /// Process the (now complete) current line held in `carry`.
    fn finish_line(st: &mut State, eng: &Engine, carry: &[u8], overflowed: bool, set_x: bool) {
        let line = st.next_line();
        if overflowed {
            st.scan_line(eng, carry, Hits::line(), line, false, true, set_x);
        } else {
            if st.tb_active() {
                st.tb_step(eng, carry, line);
            }
            st.scan_line(eng, carry, Hits::line(), line, true, false, false);
        }
        st.end_line();
    }

    /// Append bytes of the current (unterminated) line, scanning and dropping its older
    /// part if it would outgrow [`LINE_CAP`].
    fn push_partial(&mut self, eng: &Engine, bytes: &[u8]) {
        if bytes.is_empty() {
            return;
        }
        if self.carry.len() + bytes.len() <= LINE_CAP {
            self.carry.extend_from_slice(bytes);
            return;
        }
        let line = self.state.next_line();
        let carry_at_start = !self.overflowed;
        let bytes_at_start = carry_at_start && self.carry.is_empty();
        if !self.overflowed {
            // The line's start is in hand now and will be dropped: settle what needs it.
            let head: &[u8] = if self.carry.is_empty() {
                bytes
            } else {
                &self.carry
            };
            self.set_x = is_set_x_echo(head);
            if self.state.tb_active() {
                let n = head.len().min(LINE_CAP);
                self.state.tb_step(eng, &head[..n], line);
            }
        }
        let set_x = self.set_x;
        if !self.carry.is_empty() {
            self.state.scan_line(
                eng,
                &self.carry,
                Hits::line(),
                line,
                carry_at_start,
                !carry_at_start,
                set_x,
            );
            // The seam: a signature may straddle carry | bytes.
            let a = &self.carry[self.carry.len().saturating_sub(OVERLAP)..];
            let b = &bytes[..bytes.len().min(OVERLAP)];
            let mut seam = Vec::with_capacity(a.len() + b.len());
            seam.extend_from_slice(a);
            seam.extend_from_slice(b);
            self.state
                .scan_line(eng, &seam, Hits::line(), line, false, true, set_x);
        }
        self.state.scan_line(
            eng,
            bytes,
            Hits::line(),
            line,
            bytes_at_start,
            !bytes_at_start,
            set_x,
        );
        // Keep the tail (it is re-scanned with whatever follows; duplicate hits are no-ops).
        let keep_from_bytes = bytes.len().min(OVERLAP);
        let keep_from_carry = (OVERLAP - keep_from_bytes).min(self.carry.len());
        let carry_tail_start = self.carry.len() - keep_from_carry;
        self.carry.drain(..carry_tail_start);
        self.carry
            .extend_from_slice(&bytes[bytes.len() - keep_from_bytes..]);
        self.overflowed = true;
    }
}

/// Where [`State::scan_line`] finds a line's needles: by searching the line itself, or in the
/// region it was cut from, reusing the region's search (each searcher's next hit, cached), so
/// that a line with a candidate is not searched a second time by every searcher.
pub(crate) enum Hits<'a> {
    Line(NextHits),
    Region {
        buf: &'a [u8],
        /// Offset of the line in `buf`.
        at: usize,
        cache: &'a mut NextHits,
    },
}

impl Hits<'_> {
    pub(crate) fn line() -> Self {
        Hits::Line(NextHits::default())
    }

    /// The leftmost needle at or after `from` in `l` (offsets in `l`).
    #[inline]
    fn next(&mut self, eng: &Engine, l: &[u8], from: usize) -> Option<(usize, usize, Mask)> {
        match self {
            Hits::Line(cache) => eng.find_cached(l, from, cache),
            Hits::Region { buf, at, cache } => eng
                .find_cached(buf, *at + from, cache)
                .filter(|&(s, ..)| s < *at + l.len())
                .map(|(s, e, m)| (s - *at, e - *at, m)),
        }
    }
}
