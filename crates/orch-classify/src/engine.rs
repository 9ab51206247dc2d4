//! The compiled rule table, built once per process: the candidate search over every rule's
//! needles (one SIMD prefilter), each needle's rules as a bitmask, the rules per slot, and the
//! lazily compiled regexes. `scan` walks a log with it; `terminal` asks it whether an
//! exception line is a memory failure or a wrapper.

use std::collections::HashMap;
use std::sync::OnceLock;

use aho_corasick::Span;
use aho_corasick::packed::{Config, MatchKind, Searcher};
use memchr::memmem::Finder;
use regex::bytes::Regex;

use super::position::Position;
use super::rules::{Action, Kind, Mask, RULES, Rule, SLOTS, Slot};

/// A rule's regexes are compiled when a line first asks for them: most rules never match
/// in a given log, and compiling all of them up front cost more than scanning a 50 MB log.
pub(crate) struct CompiledRule {
    pub(crate) rule: &'static Rule,
    re: OnceLock<Regex>,
    /// `re` anchored at the start of the haystack: where only the start of a line's body may
    /// report (a message or lead rule on a line that reports nothing else), one anchored
    /// attempt replaces a search through the line (trap lines are most of what reaches here).
    anchored: OnceLock<Regex>,
    unless: OnceLock<Option<Regex>>,
    /// `rule.requires`, as SIMD substring searchers built once.
    requires: Vec<Finder<'static>>,
    /// The rule's own needles, where the prefilter looks for some of them through an
    /// [`ANCHORS`] entry (empty otherwise): a segment holding none of them is not the rule's.
    needles: Vec<Finder<'static>>,
}

impl CompiledRule {
    fn compile(&self, pattern: &str) -> Regex {
        Regex::new(pattern).unwrap_or_else(|e| panic!("{}: {e}", self.rule.name))
    }
    pub(crate) fn re(&self) -> &Regex {
        self.re.get_or_init(|| self.compile(self.rule.pattern))
    }
    pub(crate) fn anchored(&self) -> &Regex {
        self.anchored
            .get_or_init(|| self.compile(&format!("^(?:{})", self.rule.pattern)))
    }
    /// Could the rule match `seg` at all: one of its needles there (where the prefilter only
    /// saw an anchor) and one of its `requires`? Cheap literal checks before the regex.
    pub(crate) fn may_match(&self, seg: &[u8]) -> bool {
        let any = |fs: &[Finder]| fs.is_empty() || fs.iter().any(|f| f.find(seg).is_some());
        any(&self.needles) && any(&self.requires)
    }
    pub(crate) fn unless_matches(&self, seg: &[u8]) -> bool {
        self.unless
            .get_or_init(|| self.rule.unless.map(|u| self.compile(u)))
            .as_ref()
            .is_some_and(|u| u.is_match(seg))
    }
}

/// Everything compiled once per process.
pub(crate) struct Engine {
    /// Every needle of every rule, leftmost-first: a SIMD Teddy search that confirms
    /// candidates by comparing the literal and reports which needle matched.
    candidates: Vec<Searcher>,
    /// Needle (pattern id of `candidates`, per searcher) -> bitmask of rules (indexes into `rules`)
    /// that need that needle.
    needle_rules: Vec<Vec<Mask>>,
    /// Rules of [`Kind::Message`] (dropped on warning/info-level lines).
    pub(crate) message_rules: Mask,
    /// Rules that claim their segment (they run even when their slot is full).
    pub(crate) claim_rules: Mask,
    pub(crate) rules: Vec<CompiledRule>,
    /// Per slot: the rules that can only produce a hit in that slot (once the slot holds
    /// its earliest hit, they need not run again).
    pub(crate) slot_rules: [Mask; SLOTS],
    /// Rules of the memory slots (an exception line is checked against them even when
    /// their slots are full, to know whether it ends a memory failure).
    pub(crate) memory_rules: Mask,
    /// Rules of the device-memory slots (a `MemoryError` whose message names a device
    /// allocator is the device's, not the host's).
    pub(crate) device_rules: Mask,
    /// Rules of the weak error slot (wrappers: an exception line matching one is teardown).
    pub(crate) weak_rules: Mask,
    /// SGLang `server_args=ServerArgs(...)` dump.
    pub(crate) server_args: Finder<'static>,
    /// A traceback frame line, `  File "..."`.
    pub(crate) frame: Finder<'static>,
    /// verl `pprint` of its config (`{'actor_rollout_ref': {...`, `  'experiment_name': ..`),
    /// optionally behind a Ray `(TaskRunner pid=..)` prefix and ANSI colour.
    pub(crate) config_dump: Regex,
    /// The final line of a Python traceback: `pkg.ExcName(Inner): message` or `ExcName`.
    pub(crate) exception_line: Regex,
}

/// Substrings shared by several needles, which the prefilter looks for in their place (a
/// needle that holds one is found through it; `CompiledRule::may_match` then checks the
/// needle itself). Fewer literals keep the SIMD prefilter fast: the 133 needles of the
/// runtimes' vocabulary took two Teddy searchers 96 ms per 100 MB of the bench's realistic log,
/// the 96 literals left with these 30 anchors 63 ms (adversarial log: 110 and 87 ms). Chosen
/// by a greedy cover of the needles, each anchor adding at most 10 hits per 30 MB of the bench
/// logs and the corpus; none found more than 1,200 times in 40 MB of English-commented Rust
/// sources. Purely a speed matter: any needle holding none stays a literal of its own. Batch
/// J's vocabulary (YARN, the JVM, RMM, Flux, Dask) added 6 literals, and `"xit "` and `"y
/// limit"` took back 3: at 100 literals the bench logs scan about as fast as at 98. No anchor
/// shorter than 4 bytes: one of 3 (`"oom"`) shortened Teddy's fingerprint and cost 15–30 %.
/// Batch M's `"imeou"` and `"timed"` carry the time limits and collective timeouts of
/// torch, torchelastic, submitit, Modal and CI runners on one literal each, and
/// `"xecution t"` GitHub Actions' and gitlab-runner's job limits, `"KV cache is "` vLLM's and
/// llama.cpp's full caches. One searcher takes at most 128 literals (aho-corasick's packed
/// limit): batches Q–X's vocabulary came in under it by `" to allocate"` (four allocator
/// phrases), `" code"` (exit and return codes), `"Alloc"` (CUDA's and torch's allocator
/// names) and `"kill"` (the kernel's, cgroups' and Go's kill words; not in the bench's realistic
/// log, 162 times in the corpus) taking literals back. Not `"allocat"` nor `"KV cache "`: verl's memory reports and
/// vLLM's startup lines hold them on every step (60,877 and 17,366 hits in 40 MB of the bench's
/// realistic log; the scan took twice as long). Batch AA's device allocators came in under it
/// by `"f GPU "` (CUDA.jl's and OpenVINO's `out of GPU ...`) and `"Actor"` (Ray's two actor
/// deaths), batch AI's HCCL socket timeout by `"times out"` (with HCCL's notify timeout), none
/// of them in the bench's logs; batches AK–AM's by `"allocati"` taking the place of
/// `"allocatin"` (four allocation phrases on one literal; 0 times in the bench's logs, 98 in the
/// corpus); batches AN–AO's node losses by `" dea"` taking the place of `"ed dea"` (Ray's
/// `marked dead` and `its node has died`, PBS's `deadline`; 0 times in the bench's logs).
const ANCHORS: [&str; 42] = [
    "Kill",
    "Not e",
    "ceede",
    "ored ",
    " code",
    "UT_O",
    "MPTE",
    " dea",
    "ter th",
    "led to a",
    "f me",
    "o memory ",
    "ow o",
    "ror e",
    "lost",
    "peration t",
    "tOfM",
    "Node ",
    "eempte",
    "IMEO",
    "SIGK",
    "hild",
    "Error in ",
    "_FAI",
    "sible",
    "ectable ",
    "allocati",
    ": Faile",
    " FAI",
    "xit ",
    "y limit",
    "imeou",
    "timed",
    "xecution t",
    "KV cache is ",
    "Alloc",
    " to allocate",
    "kill",
    "MemoryError",
    "f GPU ",
    "Actor",
    "times out",
];

/// The literal the prefilter looks for to find `needle`: the first anchor it holds with no quote
/// before it in the needle (a quote would change what [`super::position::in_quotes`] sees at
/// the anchor), or the needle itself.
fn literal_for(needle: &'static str) -> &'static str {
    ANCHORS
        .iter()
        .find(|a| {
            needle
                .find(*a)
                .is_some_and(|k| !needle[..k].contains(['"', '\'', '`']))
        })
        .copied()
        .unwrap_or(needle)
}

/// Most needles the prefilter takes (the u128 rule masks' width is the rules' limit; this one
/// keeps the searchers few).
pub(crate) const NEEDLE_LIMIT: usize = 192;
/// Most needles one Teddy searcher takes (its own heuristic's limit).
pub(crate) const NEEDLE_CHUNK: usize = 64;

/// Each searcher's next hit in the region being scanned (`None` inside: no more hits), so
/// that a searcher whose next hit lies far ahead is not searched again for every hit of the
/// others.
#[derive(Debug, Default)]
pub(crate) struct NextHits([Option<Option<(usize, usize, Mask)>>; MAX_SEARCHERS]);

/// Most searchers (so [`NextHits`] lives on the stack): [`NEEDLE_LIMIT`] / [`NEEDLE_CHUNK`].
const MAX_SEARCHERS: usize = NEEDLE_LIMIT.div_ceil(NEEDLE_CHUNK);

/// The prefilter's literals (each needle's [`literal_for`], once), in rule order.
pub(crate) fn literals() -> Vec<&'static str> {
    let mut out: Vec<&'static str> = Vec::new();
    for n in RULES.iter().flat_map(|r| r.needles.iter()) {
        let literal = literal_for(n);
        if !out.contains(&literal) {
            out.push(literal);
        }
    }
    out
}

/// The literals of each Teddy searcher. One searcher in the planned order
/// ([`crate::prefilter`]) when the plan is current: over the bench's logs it took half the
/// time of two. Otherwise the list sorted (ignoring case) and cut into searchers of at most
/// [`NEEDLE_CHUNK`]: Teddy slows down as its 16 buckets fill, and one searcher over 119
/// needles in sorted order scanned a 30 MB realistic log in 78 ms where two over its halves
/// took 12 + 12 ms.
fn searcher_parts(literals: Vec<&'static str>) -> Vec<Vec<&'static str>> {
    if (33..=PACKED_LIMIT).contains(&literals.len())
        && fat_teddy()
        && let Some(planned) = super::prefilter::order(&literals)
    {
        return vec![planned];
    }
    sorted_parts(literals)
}

/// One leftmost-first packed searcher over `part` (at most [`PACKED_LIMIT`] literals).
fn teddy(part: &[&str]) -> Searcher {
    Config::new()
        .match_kind(MatchKind::LeftmostFirst)
        .heuristic_pattern_limits(false)
        .builder()
        .extend(part)
        .build()
        .expect("needle searcher")
}

/// Most literals one packed searcher takes (aho-corasick's `PATTERN_LIMIT`).
const PACKED_LIMIT: usize = 128;

/// Whether Teddy has its 16 buckets here (AVX2): the plan is made for them. Elsewhere (aarch64,
/// SSSE3 only) it has 8, and the sorted halves, measured before the plan, are used.
fn fat_teddy() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        std::arch::is_x86_feature_detected!("avx2")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// The literals sorted (ignoring case) and cut into searchers of at most [`NEEDLE_CHUNK`].
fn sorted_parts(literals: Vec<&'static str>) -> Vec<Vec<&'static str>> {
    let mut sorted = literals;
    sorted.sort_unstable_by(|a, b| {
        a.to_ascii_lowercase()
            .cmp(&b.to_ascii_lowercase())
            .then(a.cmp(b))
    });
    let chunk = sorted
        .len()
        .div_ceil(sorted.len().div_ceil(NEEDLE_CHUNK).max(1))
        .max(1);
    sorted.chunks(chunk).map(<[_]>::to_vec).collect()
}

pub(crate) fn engine() -> &'static Engine {
    static ENGINE: OnceLock<Engine> = OnceLock::new();
    ENGINE.get_or_init(Engine::build)
}

impl Engine {
    fn build() -> Engine {
        assert!(
            RULES.len() <= Mask::BITS as usize,
            "rule masks are {} bits",
            Mask::BITS
        );
        let mut needle_rules: HashMap<&'static [u8], Mask> = HashMap::new();
        let mut through_anchor: Mask = 0;
        for (i, rule) in RULES.iter().enumerate() {
            assert!(!rule.needles.is_empty(), "rule {} has no needle", rule.name);
            for n in rule.needles {
                assert!(!n.contains(['\n', '\r']), "needle {n:?} spans lines");
                let literal = literal_for(n);
                if literal != *n {
                    through_anchor |= 1 << i;
                }
                *needle_rules.entry(literal.as_bytes()).or_default() |= 1 << i;
            }
        }
        let order = literals();
        assert!(
            order.len() <= NEEDLE_LIMIT,
            "{} needles: at most {NEEDLE_LIMIT} keep the SIMD prefilter",
            order.len()
        );
        // Leftmost-first reports the first of two literals that start at one byte, so none may
        // be a prefix of another.
        let prefix = order.iter().find_map(|a| {
            order
                .iter()
                .find(|b| a != *b && b.starts_with(a))
                .map(|b| (a, b))
        });
        assert!(
            prefix.is_none(),
            "prefilter literals {prefix:?}: one is a prefix of the other (an anchor or a needle must change)"
        );
        let parts = searcher_parts(order);
        let (candidates, needle_rules): (Vec<Searcher>, Vec<Vec<Mask>>) = parts
            .iter()
            .map(|part| {
                let searcher = teddy(part);
                let rules = part.iter().map(|n| needle_rules[n.as_bytes()]).collect();
                (searcher, rules)
            })
            .unzip();
        let message_rules = RULES
            .iter()
            .enumerate()
            .filter(|(_, r)| r.kind != Kind::Format)
            .fold(0 as Mask, |m, (i, _)| m | 1 << i);
        let claim_rules = RULES
            .iter()
            .enumerate()
            .filter(|(_, r)| r.claims)
            .fold(0 as Mask, |m, (i, _)| m | 1 << i);
        let mut slot_rules = [0 as Mask; SLOTS];
        let (mut memory_rules, mut weak_rules, mut device_rules) =
            (0 as Mask, 0 as Mask, 0 as Mask);
        for (i, rule) in RULES.iter().enumerate() {
            // Traceback headers are never "done": every traceback is followed, the last
            // one that ends the process decides (see `terminal`).
            if let Action::Hit(slot) = rule.action {
                slot_rules[slot as usize] |= 1 << i;
                if slot.is_memory() {
                    memory_rules |= 1 << i;
                }
                if matches!(slot, Slot::GpuOom | Slot::GpuOomWeak | Slot::KvCache) {
                    device_rules |= 1 << i;
                }
                if slot == Slot::ErrorWeak {
                    weak_rules |= 1 << i;
                }
            }
        }
        let finders = |literals: &[&'static str]| {
            literals
                .iter()
                .map(|r| Finder::new(r.as_bytes()))
                .collect::<Vec<_>>()
        };
        let rules = RULES
            .iter()
            .enumerate()
            .map(|(i, rule)| CompiledRule {
                rule,
                re: OnceLock::new(),
                anchored: OnceLock::new(),
                unless: OnceLock::new(),
                requires: finders(rule.requires),
                needles: if through_anchor & (1 << i) != 0 {
                    finders(rule.needles)
                } else {
                    Vec::new()
                },
            })
            .collect();
        Engine {
            candidates,
            needle_rules,
            message_rules,
            claim_rules,
            rules,
            slot_rules,
            memory_rules,
            device_rules,
            weak_rules,
            server_args: Finder::new(b"ServerArgs("),
            frame: Finder::new(b"File \""),
            config_dump: Regex::new(
                r"^(?:\x1b\[[0-9;]*m)*(?:\([^)]*\)(?:\x1b\[[0-9;]*m)*\s*)?\s*\{*'[\w.\-]+': ",
            )
            .expect("config dump regex"),
            // A wrapper's name cut inside its parentheses by a paste
            // (`ray.exceptions.RayTaskError(ValueErr`) still ends the traceback.
            exception_line: Regex::new(
                r"^[A-Za-z_][\w.]*(?:(?:\([\w.]*\))?(?::(?:\s|$)|$)|\([\w.]+$)",
            )
            .expect("exception regex"),
        }
    }
}

impl Engine {
    /// Does any rule in `mask` match `seg` in reporting position (ignoring which slots are
    /// already full)? Only run on exception lines, which are rare.
    pub(crate) fn matches_any(&self, seg: &[u8], mask: Mask) -> bool {
        let pos = Position::of(seg);
        let mut from = 0;
        while let Some((start, _, needle)) = self.find(seg, from) {
            from = start + 1;
            let todo = needle & mask;
            for (i, cr) in self.rules.iter().enumerate() {
                if todo & (1 << i) == 0 {
                    continue;
                }
                if cr.may_match(seg)
                    && let Some(rm) = cr.re().find(seg)
                    && !cr.unless_matches(seg)
                    && pos.allows(seg, cr.rule.kind, rm.start())
                {
                    return true;
                }
            }
        }
        false
    }
}

/// The leftmost of two hits; two needles at one byte (of different searchers) select both
/// rule sets.
fn leftmost(
    best: Option<(usize, usize, Mask)>,
    hit: Option<(usize, usize, Mask)>,
) -> Option<(usize, usize, Mask)> {
    match (best, hit) {
        (Some(b), Some(h)) if b.0 == h.0 => Some((b.0, b.1.max(h.1), b.2 | h.2)),
        (Some(b), Some(h)) => Some(if b.0 < h.0 { b } else { h }),
        (b, h) => b.or(h),
    }
}

impl Engine {
    /// The leftmost needle at or after `from`: its span and the rules that need it.
    #[inline]
    pub(crate) fn find(&self, hay: &[u8], from: usize) -> Option<(usize, usize, Mask)> {
        self.find_cached(hay, from, &mut NextHits::default())
    }

    /// [`Engine::find`] over one haystack, reusing each searcher's next hit from `cache` while
    /// it is at or after `from` (calls must not go backwards in one haystack).
    pub(crate) fn find_cached(
        &self,
        hay: &[u8],
        from: usize,
        cache: &mut NextHits,
    ) -> Option<(usize, usize, Mask)> {
        let mut best: Option<(usize, usize, Mask)> = None;
        for (k, searcher) in self.candidates.iter().enumerate() {
            let hit = match cache.0[k] {
                Some(Some(h)) if h.0 >= from => Some(h),
                Some(None) => None,
                _ => {
                    let h = searcher.find_in(hay, Span::from(from..hay.len())).map(|m| {
                        (
                            m.start(),
                            m.end(),
                            self.needle_rules[k][m.pattern().as_usize()],
                        )
                    });
                    cache.0[k] = Some(h);
                    h
                }
            };
            best = leftmost(best, hit);
        }
        best
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Both arrangements of the literals — the planned single searcher and the sorted halves a
    /// stale plan falls back to — find every literal, alone and inside a line, and say which.
    #[test]
    fn every_literal_is_found_by_the_plan_and_by_the_fallback() {
        let literals = literals();
        let planned = super::super::prefilter::order(&literals).expect("the plan is current");
        for parts in [vec![planned], sorted_parts(literals.clone())] {
            let mut seen: Vec<&str> = parts.iter().flatten().copied().collect();
            seen.sort_unstable();
            let mut want = literals.clone();
            want.sort_unstable();
            assert_eq!(seen, want, "each literal in exactly one searcher");
            let searchers: Vec<(Searcher, &Vec<&str>)> =
                parts.iter().map(|p| (teddy(p), p)).collect();
            for l in &literals {
                let line = format!("step 3 | {l} | done");
                // The leftmost hit of any searcher, as `find_cached` takes it.
                let found = searchers
                    .iter()
                    .filter_map(|(s, p)| {
                        s.find(line.as_bytes())
                            .map(|m| (p[m.pattern().as_usize()], m.start()))
                    })
                    .min_by_key(|&(_, at)| at);
                assert_eq!(found, Some((*l, 9)), "{l:?} in {} searcher(s)", parts.len());
            }
        }
    }

    /// Every alternative of every rule is reachable through its needles: strings generated from
    /// each rule's regex (each alternation's branches drawn at random, 400 per rule, a fixed
    /// seed) each hold one of the rule's needles. A branch no needle finds would never be
    /// looked at (`CUDA_ERROR_OUT_OF_MEMORY` alone on a line was such a branch). Look-arounds
    /// (`^`, `$`, `\b`) are dropped to generate: they add no text.
    #[test]
    fn every_alternative_is_reachable_through_a_needle() {
        use proptest::strategy::{Strategy, ValueTree};
        use proptest::test_runner::{Config, RngAlgorithm, TestRng, TestRunner};
        let mut unreachable = Vec::new();
        for rule in RULES {
            // `^` only where it anchors (not a class's negation, `[^)]`).
            let mut pattern = String::new();
            for c in rule
                .pattern
                .replace("\\b", "")
                .replace("(?:^|", "(?:")
                .chars()
            {
                if c == '$' || (c == '^' && !pattern.ends_with('[')) {
                    continue;
                }
                pattern.push(c);
            }
            let strategy = proptest::string::string_regex(&pattern)
                .unwrap_or_else(|e| panic!("{}: {e}", rule.name));
            let rng = TestRng::from_seed(RngAlgorithm::ChaCha, &[7; 32]);
            let mut runner = TestRunner::new_with_rng(Config::default(), rng);
            for _ in 0..400 {
                let sample = strategy.new_tree(&mut runner).expect("a sample").current();
                if !rule.needles.iter().any(|n| sample.contains(n)) {
                    unreachable.push(format!("{}: {sample:?}", rule.name));
                    break;
                }
            }
        }
        assert!(
            unreachable.is_empty(),
            "no needle finds:\n{}",
            unreachable.join("\n")
        );
    }

    /// Every anchor stands for at least two needles (one standing for one only slows the
    /// prefilter), and the literals the prefilter searches are fewer than the needles.
    #[test]
    fn every_anchor_is_shared() {
        let mut needles: Vec<&str> = RULES
            .iter()
            .flat_map(|r| r.needles.iter().copied())
            .collect();
        needles.sort_unstable();
        needles.dedup();
        for a in ANCHORS {
            let n = needles.iter().filter(|n| literal_for(n) == a).count();
            assert!(n >= 2, "anchor {a:?} stands for {n} needle(s)");
        }
        let mut literals: Vec<&str> = needles.iter().map(|n| literal_for(n)).collect();
        literals.sort_unstable();
        literals.dedup();
        assert!(
            literals.len() + ANCHORS.len() <= needles.len(),
            "{} literals",
            literals.len()
        );
    }

    #[test]
    fn every_rule_compiles() {
        // Regexes compile lazily; a bad pattern must still fail a test, not a user's run.
        for cr in &engine().rules {
            // A `\b` written where an escape was not raw becomes a backspace, which compiles
            // and matches nothing.
            let r = cr.rule;
            for p in [r.pattern, r.ere].into_iter().chain(r.unless) {
                assert!(
                    !p.contains(char::is_control),
                    "{}: control character in {p:?}",
                    r.name
                );
            }
            cr.re();
            cr.anchored();
            cr.unless_matches(b"");
        }
    }
}
