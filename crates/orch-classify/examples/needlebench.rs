//! Time one Teddy searcher over a needle list on a log, to choose needles and how to split
//! them (`engine.rs` cites its figures):
//!
//! ```text
//! cargo build --release -p orch-classify --example needlebench
//! target/release/examples/needlebench NEEDLES.txt LOG     # one needle a line
//! ```

use aho_corasick::Span;
use aho_corasick::packed::{Config, MatchKind, Searcher};

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.len() != 3 {
        eprintln!("usage: needlebench NEEDLES.txt LOG");
        std::process::exit(2);
    }
    let needles: Vec<String> = std::fs::read_to_string(&args[1])
        .expect("needle list")
        .lines()
        .map(String::from)
        .collect();
    let hay = std::fs::read(&args[2]).expect("log");
    let searcher: Searcher = Config::new()
        .match_kind(MatchKind::LeftmostFirst)
        .heuristic_pattern_limits(false)
        .builder()
        .extend(&needles)
        .build()
        .expect("searcher");
    let started = std::time::Instant::now();
    let (mut hits, mut from) = (0, 0);
    while let Some(m) = searcher.find_in(&hay, Span::from(from..hay.len())) {
        hits += 1;
        from = m.start() + 1;
    }
    println!(
        "{} needles: {hits} hits in {:?}",
        needles.len(),
        started.elapsed()
    );
}
