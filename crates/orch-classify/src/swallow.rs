//! Failures a trainer reports and carries on past.
//!
//! Some trainers catch what their training step raises, log one line and go on: genrl 0.1.11
//! (RL Swarm) wraps `trainer.train` in a bare `except:` that logs `Error occurred during
//! training, continuing...` at INFO level and never prints the exception; its `run_game` logs
//! `Exception occurred during game run.` with the traceback and returns, and the process exits 0.
//! The scanner ([`crate::Scanner`]) cannot know that such a line ends anything: the same words
//! in another trainer's log may be a recovery that worked (fairseq's `attempting to recover
//! from OOM`). So the trainer's template declares them, as data ([`SwallowRule`]): the line's
//! words, how many reports end the run, and the class to answer when the log names no failure
//! of its own. A [`SwallowWatch`] counts them as the log is read.
//!
//! A line counts when it *reports* the words: after the prefixes tools put before what they
//! report (logger headers, timestamps, rank labels; [`crate::position`]) the body starts with
//! them. A config dump, an echoed command or a quoted message that contains them does not count.

use serde::{Deserialize, Serialize};

use super::normalise::strip_prefixes;
use super::text::strip_ansi;
use super::{Evidence, FailureClass, Verdict};

/// Longest line kept whole while it is incomplete; a longer one is judged by its start.
const PARTIAL_CAP: usize = 64 * 1024;

/// A line a trainer logs when it catches a failure and carries on, declared by its template.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SwallowRule {
    /// The words the line's body starts with (after logger headers and other prefixes).
    pub line: String,
    /// Reports of it that end the run (1: the first).
    #[serde(default = "one")]
    pub after: u32,
    /// The class to answer when the log names no failure of its own (a memory failure the
    /// log names always answers first).
    #[serde(default = "error_class")]
    pub class: FailureClass,
    /// Why the line ends the run (shown nowhere; the template's reader needs it).
    #[serde(default)]
    pub why: String,
}

fn one() -> u32 {
    1
}

fn error_class() -> FailureClass {
    FailureClass::Error
}

/// A declared line reported often enough to end the run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Swallowed {
    /// The rule's class (what to answer when the log names nothing else).
    pub class: FailureClass,
    /// How many reports were counted when it fired.
    pub count: u32,
    /// The report that reached the threshold.
    pub evidence: Evidence,
}

/// Counts a log's reports of its template's [`SwallowRule`]s as the log is read.
#[derive(Debug, Clone, Default)]
pub struct SwallowWatch {
    rules: Vec<(SwallowRule, u32)>,
    /// The incomplete last line (bounded by [`PARTIAL_CAP`]).
    partial: Vec<u8>,
    /// Newlines seen so far.
    lines: u64,
    fired: Option<Swallowed>,
}

impl SwallowWatch {
    /// A watch for these rules (none: it never fires and costs nothing).
    pub fn new(rules: &[SwallowRule]) -> Self {
        SwallowWatch {
            rules: rules
                .iter()
                .filter(|r| !r.line.is_empty())
                .map(|r| (r.clone(), 0))
                .collect(),
            ..Self::default()
        }
    }

    /// Take in the next bytes of the log (may split lines anywhere).
    pub fn feed(&mut self, bytes: &[u8]) {
        if self.rules.is_empty() || self.fired.is_some() {
            return;
        }
        let mut start = 0;
        for nl in memchr::memchr_iter(b'\n', bytes) {
            self.lines += 1;
            if self.partial.is_empty() {
                self.line(&bytes[start..nl], self.lines);
            } else {
                let room = PARTIAL_CAP.saturating_sub(self.partial.len());
                let take = (nl - start).min(room);
                self.partial.extend_from_slice(&bytes[start..start + take]);
                let whole = std::mem::take(&mut self.partial);
                self.line(&whole, self.lines);
            }
            start = nl + 1;
            if self.fired.is_some() {
                return;
            }
        }
        let room = PARTIAL_CAP.saturating_sub(self.partial.len());
        let rest = &bytes[start..];
        self.partial
            .extend_from_slice(&rest[..rest.len().min(room)]);
    }

    /// The end of the log: an unterminated last line counts too.
    pub fn finish(&mut self) {
        if !self.partial.is_empty() && self.fired.is_none() {
            let whole = std::mem::take(&mut self.partial);
            self.line(&whole, self.lines + 1);
        }
    }

    /// The declared line that reached its threshold, if one did.
    pub fn fired(&self) -> Option<&Swallowed> {
        self.fired.as_ref()
    }

    fn line(&mut self, line: &[u8], number: u64) {
        if !self
            .rules
            .iter()
            .any(|(r, _)| memchr::memmem::find(line, r.line.as_bytes()).is_some())
        {
            return;
        }
        // What a `\r` progress bar drew last holds the report, as each segment does.
        for seg in line.split(|b| *b == b'\r') {
            let seg = strip_ansi(seg);
            let (body, _) = strip_prefixes(&seg);
            let text = &seg[body..];
            for (rule, count) in &mut self.rules {
                if text.starts_with(rule.line.as_bytes()) {
                    *count += 1;
                    if *count >= rule.after.max(1) {
                        self.fired = Some(Swallowed {
                            class: rule.class,
                            count: *count,
                            evidence: Evidence {
                                line: number,
                                text: String::from_utf8_lossy(&seg[..seg.len().min(400)])
                                    .trim()
                                    .to_string(),
                                rule: Some(format!("swallowed: {}", rule.line)),
                            },
                        });
                        return;
                    }
                }
            }
        }
    }
}

/// The verdict of a log whose trainer swallowed a failure: the log's own verdict when it names
/// a memory failure (the OOM traceback a trainer logged before it carried on, with its numbers)
/// or any failure where the rule's class is `error`; otherwise the rule's class, with the
/// swallowed line as evidence.
pub fn answer(v: Verdict, s: &Swallowed) -> Verdict {
    let memory = v.class.is_memory();
    if memory || (s.class == FailureClass::Error && v.class != FailureClass::None) {
        return v;
    }
    Verdict {
        class: s.class,
        evidence: Some(s.evidence.clone()),
        memory: None,
        rank: super::rules::rank_of(s.class),
        certainty: super::Certainty::Certain,
        if_failed: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn genrl() -> Vec<SwallowRule> {
        vec![SwallowRule {
            line: "Error occurred during training, continuing...".into(),
            after: 1,
            class: FailureClass::GpuOom,
            why: String::new(),
        }]
    }

    fn fed(rules: &[SwallowRule], chunks: &[&str]) -> Option<Swallowed> {
        let mut w = SwallowWatch::new(rules);
        for c in chunks {
            w.feed(c.as_bytes());
        }
        w.finish();
        w.fired().cloned()
    }

    const HYDRA: &str = "[2025-07-01 12:00:00,123][genrl.logging_utils.global_defs][INFO] - ";

    #[test]
    fn genrl_report_behind_hydra_logging_fires_at_its_line() {
        let log = format!(
            "{HYDRA}Starting round: 1/1000000.\n{HYDRA}Error occurred during training, continuing...\n{HYDRA}Starting round: 2/1000000.\n"
        );
        let s = fed(&genrl(), &[&log]).expect("fires");
        assert_eq!(s.class, FailureClass::GpuOom);
        assert_eq!(s.evidence.line, 2);
        assert!(s.evidence.text.ends_with("continuing..."), "{s:?}");
        // Split anywhere, the same answer.
        for cut in 0..log.len() {
            assert_eq!(fed(&genrl(), &[&log[..cut], &log[cut..]]), Some(s.clone()));
        }
    }

    #[test]
    fn threshold_counts_reports() {
        let mut rules = genrl();
        rules[0].after = 3;
        let line = "Error occurred during training, continuing...\n";
        assert_eq!(fed(&rules, &[&line.repeat(2)]), None);
        let s = fed(&rules, &[&line.repeat(5)]).unwrap();
        assert_eq!((s.count, s.evidence.line), (3, 3));
    }

    #[test]
    fn mentions_and_other_trainers_do_not_fire() {
        for trap in [
            // a config dump quoting it
            "  message: \"Error occurred during training, continuing...\"\n",
            "# Error occurred during training, continuing...\n",
            // an echoed command
            "+ grep 'Error occurred during training, continuing...' log\n",
            // words inside a longer message
            "WARNING - the trainer says Error occurred during training, continuing...\n",
            // fairseq's recovered OOM: another trainer's words, not declared here
            "| WARNING: attempting to recover from OOM in forward/backward pass\n",
        ] {
            assert_eq!(fed(&genrl(), &[trap]), None, "{trap:?}");
        }
        assert_eq!(
            fed(&[], &["Error occurred during training, continuing...\n"]),
            None
        );
    }

    #[test]
    fn answer_keeps_the_logs_memory_failure_or_gives_the_rules_class() {
        let s = fed(
            &genrl(),
            &["Error occurred during training, continuing...\n"],
        )
        .unwrap();
        let none = crate::classify_bytes(b"round 1\n");
        let a = answer(none, &s);
        assert_eq!(a.class, FailureClass::GpuOom);
        assert_eq!(a.evidence.unwrap().line, 1);
        let oom = crate::classify_bytes(
            b"torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 23.65 GiB of which 1.00 GiB is free.\n",
        );
        let a = answer(oom, &s);
        assert_eq!(a.class, FailureClass::GpuOom);
        assert!(a.memory.is_some());
        // A rule whose class is `error`: the log's own failure, whatever it is, answers.
        let mut rule = genrl();
        rule[0].class = FailureClass::Error;
        let s = fed(&rule, &["Error occurred during training, continuing...\n"]).unwrap();
        let other = crate::classify_bytes(
            b"Traceback (most recent call last):\n  File \"a.py\", line 1, in <module>\nKeyError: 'x'\n",
        );
        assert_eq!(answer(other, &s).class, FailureClass::Error);
    }
}
