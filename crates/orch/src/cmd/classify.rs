//! `orch classify LOG...`.

use crate::cli::ClassifyArgs;
use orch_classify::{classify_path, grep_patterns};
use orch_core::error::code;

/// Classify each log (or print the patterns), as text or JSON on stdout.
pub fn classify(args: ClassifyArgs) -> anyhow::Result<u8> {
    if args.dump_patterns {
        for (_, pattern) in grep_patterns() {
            outln!("{pattern}");
        }
        return Ok(code::OK);
    }
    let mut results = Vec::new();
    for path in &args.logs {
        let verdict = classify_path(path)
            .map_err(|e| anyhow::anyhow!("cannot read {}: {e}", path.display()))?;
        results.push((path, verdict));
    }
    if args.json {
        let json: Vec<_> = results
            .iter()
            .map(|(path, v)| {
                serde_json::json!({
                    "file": path.display().to_string(),
                    "class": v.class.as_str(),
                    "line": v.evidence.as_ref().map(|e| e.line),
                    "evidence": v.evidence.as_ref().map(|e| e.text.clone()),
                    "memory": v.memory,
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
    Ok(code::OK)
}
