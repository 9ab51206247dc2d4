//! `orch classify LOG...`.

use crate::cli::ClassifyArgs;
use orch_classify::{classify_path, explain_decorations, grep_patterns};
use orch_core::error::code;

/// Classify each log (or print the patterns), as text or JSON on stdout. `explain` (`-v`) adds,
/// under each verdict, the signature that decided and the decorations the normaliser peeled off
/// its line (as ripgrep's `--debug` says why a file matched), and what a failed job's reading
/// would decide where it differs.
pub fn classify(args: ClassifyArgs, explain: bool) -> anyhow::Result<u8> {
    if args.dump_patterns {
        for (_, pattern) in grep_patterns() {
            outln!("{pattern}");
        }
        return Ok(code::OK);
    }
    // Each readable log is classified; an unreadable one is named on stderr and makes the
    // exit code 2 (bad input), without hiding the others' results.
    let mut results = Vec::new();
    let mut unreadable = 0;
    for path in &args.logs {
        match classify_path(path) {
            Ok(verdict) => results.push((path, verdict)),
            Err(e) => {
                unreadable += 1;
                eprintln!("error: cannot read {}: {e}", path.display());
            }
        }
    }
    let status = if unreadable > 0 {
        code::USAGE
    } else {
        code::OK
    };
    if args.json {
        // The evidence has the shape `history --json` gives it: file, line, text, memory.
        let json: Vec<_> = results
            .iter()
            .map(|(path, v)| {
                let file = path.display().to_string();
                serde_json::json!({
                    "file": file,
                    "class": v.class.as_str(),
                    "evidence": v.evidence.as_ref().map(|e| serde_json::json!({
                        "file": file,
                        "line": e.line,
                        "text": e.text,
                        "rule": e.rule,
                        "memory": v.memory,
                    })),
                })
            })
            .collect();
        outln!("{}", serde_json::to_string_pretty(&json)?);
    } else {
        for (path, v) in &results {
            match &v.evidence {
                Some(e) => outln!(
                    "{}: {} (line {}): {}",
                    path.display(),
                    v.class.as_str(),
                    e.line,
                    e.text
                ),
                None => outln!("{}: {}", path.display(), v.class.as_str()),
            }
            if let Some(e) = v.evidence.as_ref().filter(|_| explain) {
                outln!("  rule: {}", e.rule.as_deref().unwrap_or("-"));
                let (peeled, body) = explain_decorations(e.text.as_bytes());
                for (name, text) in peeled {
                    outln!("  peeled {name}: {:?}", text);
                }
                outln!("  body: {body}");
            }
            // What the watcher would read if the scheduler says the job failed: memory words
            // near the end that no line reported (a user asking why a log read `none`).
            let failed = v.given_failure();
            if explain
                && failed.class != v.class
                && let Some(e) = &failed.evidence
            {
                outln!(
                    "  if the job failed: {} (likely, line {}): {}",
                    failed.class.as_str(),
                    e.line,
                    e.text
                );
            }
            if let Some(memory) = v
                .memory
                .as_ref()
                .map(|m| m.summary())
                .filter(|s| !s.is_empty())
            {
                outln!("  memory: {memory}");
            }
        }
    }
    Ok(status)
}
