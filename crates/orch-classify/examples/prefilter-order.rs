//! Plan the order of the candidate search's literals (see `src/prefilter.rs`) from the
//! four-byte sequences of real logs, and print it as `data/prefilter-order.txt`:
//!
//! ```text
//! cargo run --release -p orch-classify --example prefilter-order > crates/orch-classify/data/prefilter-order.txt
//! ```
//!
//! The sample is every `.log` of the corpus (`tests/corpus` and its splits), real logs only:
//! the bench's generated logs would fit the plan to the bench.

use std::path::{Path, PathBuf};

fn logs(dir: &Path, out: &mut Vec<PathBuf>) {
    let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.expect("directory entry").path())
        .collect();
    entries.sort();
    for p in entries {
        if p.is_dir() {
            logs(&p, out);
        } else if p.extension().is_some_and(|x| x == "log") {
            out.push(p);
        }
    }
}

fn main() {
    let corpus = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/corpus");
    let mut files = Vec::new();
    logs(&corpus, &mut files);
    let sample: Vec<u8> = files
        .iter()
        .flat_map(|f| std::fs::read(f).expect("corpus log"))
        .collect();
    let literals = orch_classify::prefilter_literals();
    let plan = orch_classify::prefilter::plan(&literals, &sample);
    println!(
        "# The order in which the candidate search gives its literals to Teddy: `bucket<TAB>\"literal\"`."
    );
    println!(
        "# Planned by `cargo run --release -p orch-classify --example prefilter-order` from the"
    );
    println!(
        "# four-byte sequences of the corpus's {} logs ({} bytes); see src/prefilter.rs.",
        files.len(),
        sample.len()
    );
    for (bucket, literal) in plan {
        println!("{bucket}\t\"{literal}\"");
    }
}
