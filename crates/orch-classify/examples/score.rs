//! Score the classifier on corpus directories (each with its `sources.tsv`):
//!
//! ```text
//! cargo run -p orch-classify --example score -- crates/orch-classify/tests/corpus/holdout4
//! ```
//!
//! Prints, per directory: acted on correctly, exact class, memory recall (device and host),
//! memory false alarms, each label's counts and every case not classified exactly. Then the
//! same over all directories together.

use std::path::Path;

use orch_classify::corpus::{Score, score};

fn main() {
    let dirs: Vec<String> = std::env::args().skip(1).collect();
    if dirs.is_empty() {
        eprintln!("usage: score DIR...  (each DIR holds .log files and sources.tsv)");
        std::process::exit(2);
    }
    let mut all = Score {
        name: "all".to_string(),
        outcomes: Vec::new(),
    };
    for d in &dirs {
        match score(Path::new(d), d) {
            Ok(s) => {
                println!("{}", s.report());
                all.outcomes.extend(s.outcomes);
            }
            Err(e) => {
                eprintln!("error: {e}");
                std::process::exit(2);
            }
        }
    }
    if dirs.len() > 1 {
        let s = all.report();
        println!("{}", s.lines().next().unwrap_or_default());
    }
}
