//! Score the classifier on corpus directories (each with its `sources.tsv`):
//!
//! ```text
//! cargo run -p orch-classify --example score -- crates/orch-classify/tests/corpus/holdout4
//! ```
//!
//! Prints, per directory: acted on correctly, exact class, memory recall (device and host),
//! memory false alarms, each label's counts and every case not classified exactly, for the
//! strict reading (the log alone) and then the scheduler's (a case labelled with a failure is a
//! job that failed). Then the totals over all directories.

use std::path::Path;

use orch_classify::corpus::{Reading, Score, score_as};

fn main() {
    let dirs: Vec<String> = std::env::args().skip(1).collect();
    if dirs.is_empty() {
        eprintln!("usage: score DIR...  (each DIR holds .log files and sources.tsv)");
        std::process::exit(2);
    }
    let mut totals = Vec::new();
    for (reading, what) in [
        (Reading::Strict, "strict"),
        (Reading::Scheduler, "scheduler"),
    ] {
        let mut all = Score {
            name: format!("all ({what})"),
            outcomes: Vec::new(),
        };
        for d in &dirs {
            match score_as(Path::new(d), &format!("{d} ({what})"), reading) {
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
        totals.push(all.report().lines().next().unwrap_or_default().to_string());
    }
    for t in totals {
        println!("{t}");
    }
}
