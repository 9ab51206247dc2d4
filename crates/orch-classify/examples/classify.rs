//! The classifier alone, as `orch classify` calls it, for benchmarks that should not build
//! the whole `orch` binary: `classify [classify] LOG... [--json]`, `classify --dump-patterns`.
//!
//! ```text
//! cargo build --release -p orch-classify --example classify
//! ORCH=target/release/examples/classify NO_BUILD=1 scripts/bench-classify.sh 256
//! ```

use std::path::Path;

use orch_classify::{classify_path, grep_patterns};

fn main() {
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| a != "classify")
        .collect();
    if args.iter().any(|a| a == "--dump-patterns") {
        for (_, p) in grep_patterns() {
            println!("{p}");
        }
        return;
    }
    let json = args.iter().any(|a| a == "--json");
    for log in args.iter().filter(|a| !a.starts_with("--")) {
        match classify_path(Path::new(log)) {
            Ok(v) if json => println!("{}", serde_json::to_string(&v).expect("verdict as JSON")),
            Ok(v) => println!("{log}: {}", v.class.as_str()),
            Err(e) => {
                eprintln!("error: cannot read {log}: {e}");
                std::process::exit(2);
            }
        }
    }
}
