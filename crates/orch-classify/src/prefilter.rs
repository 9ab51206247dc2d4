//! The order in which the candidate search hands its literals to Teddy, planned offline.
//!
//! Teddy (aho-corasick's SIMD prefilter) files each literal into one of 16 buckets and, at
//! every position of the log, lets a bucket through to a full comparison when each of the
//! next four bytes has a low and a high nibble that some literal of that bucket has at that
//! offset. A bucket whose literals disagree at every offset lets most text through; one whose
//! literals share bytes lets little. aho-corasick 1.1 fills its buckets by position: the
//! literal at index `i` goes to bucket `15 - i % 16`, unless an earlier literal has the same
//! low nibbles in its first four bytes, which it then joins (`src/packed/teddy/generic.rs`,
//! `Teddy::new`). So the order of the list is the bucket plan.
//!
//! `data/prefilter-order.txt` holds a plan made by [`plan`]: a local search that swaps
//! literals between buckets while the share of real log text that would reach a comparison
//! falls, estimated from the four-byte sequences of the corpus's logs
//! (`cargo run --release -p orch-classify --example prefilter-order`). With it one searcher
//! takes all the literals, where sorted halves needed two; a plan that no longer names exactly
//! the rules' literals is not used (the engine falls back to the sorted halves, slower and as
//! exact), and a test says to plan again. Purely a speed matter.

use std::collections::HashMap;

/// The plan: `bucket<TAB>"literal"` per line, in the order given to Teddy.
const ORDER: &str = include_str!("../data/prefilter-order.txt");

/// Teddy's buckets when there are more than 32 literals (AVX2 "fat" Teddy).
const BUCKETS: usize = 16;
/// Teddy compares this many leading bytes of each literal (its literals are at least this long).
const FINGERPRINT: usize = 4;

/// The plan's literals in order, or why it cannot be read.
pub fn planned() -> Result<Vec<String>, String> {
    ORDER
        .lines()
        .enumerate()
        .filter(|(_, l)| !l.starts_with('#') && !l.trim().is_empty())
        .map(|(i, l)| {
            let quoted = l
                .split_once('\t')
                .map(|(_, q)| q)
                .ok_or_else(|| format!("data/prefilter-order.txt line {}: no tab", i + 1))?;
            quoted
                .strip_prefix('"')
                .and_then(|q| q.strip_suffix('"'))
                .map(String::from)
                .ok_or_else(|| format!("data/prefilter-order.txt line {}: not quoted", i + 1))
        })
        .collect()
}

/// `literals` in the plan's order when the plan names exactly them, each once.
pub(crate) fn order(literals: &[&'static str]) -> Option<Vec<&'static str>> {
    let plan = planned().ok()?;
    let mut have: Vec<&str> = plan.iter().map(String::as_str).collect();
    let mut want = literals.to_vec();
    have.sort_unstable();
    want.sort_unstable();
    if have != want {
        return None;
    }
    plan.iter()
        .map(|p| literals.iter().find(|l| **l == p.as_str()).copied())
        .collect()
}

/// Per fingerprint offset, the low and high nibbles a bucket's literals have there.
type Masks = [(u16, u16); FINGERPRINT];

fn masks<'a>(literals: impl Iterator<Item = &'a [u8]>) -> Masks {
    let mut m = [(0u16, 0u16); FINGERPRINT];
    for l in literals {
        for (j, &b) in l.iter().take(FINGERPRINT).enumerate() {
            m[j].0 |= 1 << (b & 15);
            m[j].1 |= 1 << (b >> 4);
        }
    }
    m
}

fn passes(gram: &[u8; FINGERPRINT], m: &Masks) -> bool {
    gram.iter()
        .zip(m)
        .all(|(&b, &(lo, hi))| lo & (1 << (b & 15)) != 0 && hi & (1 << (b >> 4)) != 0)
}

/// The four-byte sequences of `sample` with their share of its positions.
fn grams(sample: &[u8]) -> Vec<([u8; FINGERPRINT], f64)> {
    let mut counts: HashMap<[u8; FINGERPRINT], f64> = HashMap::new();
    let share = 1.0 / sample.len().max(1) as f64;
    for w in sample.windows(FINGERPRINT) {
        *counts.entry(w.try_into().expect("window")).or_default() += share;
    }
    counts.into_iter().collect()
}

/// What a bucket costs: the share of positions it lets through, times the comparisons each
/// such position then makes (one per literal, plus the bucket's own check).
fn cost(members: &[&[u8]], grams: &[([u8; FINGERPRINT], f64)]) -> f64 {
    if members.is_empty() {
        return 0.0;
    }
    let m = masks(members.iter().copied());
    let through: f64 = grams
        .iter()
        .filter(|(g, _)| passes(g, &m))
        .map(|(_, s)| s)
        .sum();
    through * (2.0 + members.len() as f64)
}

/// Order `literals` (each at least four bytes) so that Teddy's buckets let the least of
/// `sample` through: literals with the same low nibbles in their first four bytes travel
/// together (Teddy puts them in one bucket anyway); the groups start spread round-robin, and
/// pairs of groups in different buckets swap while the estimated cost falls. Returns
/// `(bucket, literal)` in the order to give Teddy.
pub fn plan(literals: &[&str], sample: &[u8]) -> Vec<(usize, String)> {
    assert!(
        literals.iter().all(|l| l.len() >= FINGERPRINT),
        "Teddy's fingerprint is {FINGERPRINT} bytes: a shorter literal changes it for all"
    );
    let grams = grams(sample);
    let low = |l: &str| -> Vec<u8> { l.bytes().take(FINGERPRINT).map(|b| b & 15).collect() };
    let mut groups: Vec<Vec<&str>> = Vec::new();
    for l in literals {
        match groups.iter_mut().find(|g| low(g[0]) == low(l)) {
            Some(g) => g.push(l),
            None => groups.push(vec![l]),
        }
    }
    let n = groups.len();
    // Group i starts where Teddy would put the i-th leader; swaps keep the bucket sizes.
    let mut bucket_of: Vec<usize> = (0..n).map(|i| BUCKETS - 1 - i % BUCKETS).collect();
    let members = |bucket_of: &[usize], b: usize| -> Vec<&[u8]> {
        (0..n)
            .filter(|&i| bucket_of[i] == b)
            .flat_map(|i| groups[i].iter().map(|l| l.as_bytes()))
            .collect()
    };
    let mut costs: Vec<f64> = (0..BUCKETS)
        .map(|b| cost(&members(&bucket_of, b), &grams))
        .collect();
    for _round in 0..16 {
        let mut better = false;
        for i in 0..n {
            for k in i + 1..n {
                let (bi, bk) = (bucket_of[i], bucket_of[k]);
                if bi == bk {
                    continue;
                }
                bucket_of.swap(i, k);
                let ci = cost(&members(&bucket_of, bi), &grams);
                let ck = cost(&members(&bucket_of, bk), &grams);
                if ci + ck < costs[bi] + costs[bk] - 1e-12 {
                    (costs[bi], costs[bk]) = (ci, ck);
                    better = true;
                } else {
                    bucket_of.swap(i, k);
                }
            }
        }
        if !better {
            break;
        }
    }
    // Leaders in Teddy's round-robin order, then the followers (their leader fixed their bucket).
    let mut queues: Vec<Vec<usize>> = vec![Vec::new(); BUCKETS];
    for (i, &b) in bucket_of.iter().enumerate().rev() {
        queues[b].push(i);
    }
    let mut leaders = Vec::new();
    let mut followers = Vec::new();
    for p in 0..n {
        let b = BUCKETS - 1 - p % BUCKETS;
        let g = queues[b]
            .pop()
            .expect("bucket sizes follow the round robin");
        leaders.push((b, groups[g][0].to_string()));
        followers.extend(groups[g][1..].iter().map(|l| (b, l.to_string())));
    }
    leaders.extend(followers);
    leaders
}

/// The bucket Teddy gives each literal of `order` (see the module doc).
pub fn buckets(order: &[&str]) -> Vec<usize> {
    let mut seen: HashMap<Vec<u8>, usize> = HashMap::new();
    order
        .iter()
        .enumerate()
        .map(|(i, l)| {
            let low: Vec<u8> = l.bytes().take(FINGERPRINT).map(|b| b & 15).collect();
            *seen.entry(low).or_insert(BUCKETS - 1 - i % BUCKETS)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The plan names exactly the rules' literals, and its bucket column is what Teddy will
    /// do with its order: a rule whose needles changed without a new plan fails here.
    #[test]
    fn the_plan_is_current() {
        let literals = crate::engine::literals();
        let plan = planned().expect("the plan reads");
        let mut have: Vec<&str> = plan.iter().map(String::as_str).collect();
        let mut want = literals.clone();
        have.sort_unstable();
        want.sort_unstable();
        assert_eq!(
            have, want,
            "data/prefilter-order.txt is stale: run `cargo run --release -p orch-classify --example prefilter-order`"
        );
        let columns: Vec<usize> = ORDER
            .lines()
            .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
            .map(|l| {
                l.split('\t')
                    .next()
                    .unwrap()
                    .parse()
                    .expect("bucket number")
            })
            .collect();
        let order: Vec<&str> = plan.iter().map(String::as_str).collect();
        assert_eq!(
            columns,
            buckets(&order),
            "the bucket column disagrees with the order"
        );
        assert!(
            order.len() <= 128,
            "one packed searcher takes at most 128 literals"
        );
    }

    /// Literals that differ only in their last byte are planned into one bucket (sixteen
    /// such pairs start split by the round robin); every literal is kept once.
    #[test]
    fn a_plan_groups_literals_that_share_bytes() {
        let owned: Vec<String> = ('a'..='p')
            .flat_map(|c| [format!("{c}{c}{c}1"), format!("{c}{c}{c}2")])
            .collect();
        let literals: Vec<&str> = owned.iter().map(String::as_str).collect();
        // Words that mix the letters: a bucket holding `aaa1` and `iii1` lets `aia1` through.
        let sample: String = ('a'..='p')
            .flat_map(|x| ('a'..='p').map(move |y| format!("{x}{y}{x}1 {y}{x}{y}2 ")))
            .collect();
        let plan = plan(&literals, sample.as_bytes());
        let mut names: Vec<&str> = plan.iter().map(|(_, l)| l.as_str()).collect();
        names.sort_unstable();
        let mut want = literals.clone();
        want.sort_unstable();
        assert_eq!(names, want);
        let bucket = |l: &str| plan.iter().find(|(_, x)| x == l).unwrap().0;
        for c in 'a'..='p' {
            assert_eq!(
                bucket(&format!("{c}{c}{c}1")),
                bucket(&format!("{c}{c}{c}2")),
                "{plan:?}"
            );
        }
        let order: Vec<&str> = plan.iter().map(|(_, l)| l.as_str()).collect();
        let teddy = buckets(&order);
        assert_eq!(
            plan.iter().map(|(b, _)| *b).collect::<Vec<_>>(),
            teddy,
            "the plan's buckets are Teddy's"
        );
    }
}
