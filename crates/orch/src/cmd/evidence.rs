//! `orch evidence`: what earlier attempts measured, per trainer, model and card — the store the
//! planner calibrates on before preflight (`orch_core::evidence_store`).

use std::io::Write;

use crate::cli::EvidenceArgs;
use orch_core::error::code;
use orch_core::evidence_store::EvidenceStore;
use orch_core::ledger::Ledger;

pub fn evidence(ledger: &Ledger, args: EvidenceArgs) -> anyhow::Result<u8> {
    let store = EvidenceStore::in_runs_dir(ledger.root());
    let (all, bad) = store.read();
    for line in &bad {
        eprintln!("warning: {line}: not an observation; skipped");
    }
    let done = if bad.is_empty() {
        code::OK
    } else {
        code::SKIPPED
    };
    if args.json {
        outln!("{}", serde_json::to_string_pretty(&all)?);
        return Ok(done);
    }
    if all.is_empty() {
        eprintln!(
            "no evidence in {} yet: every attempt that measures its peak or runs out of memory adds a line",
            store.path().display()
        );
        return Ok(done);
    }
    // Grouped by key, oldest first within each.
    let mut keys: Vec<_> = all.iter().map(|o| o.key.clone()).collect();
    keys.sort();
    keys.dedup();
    let width = all.iter().map(|o| o.run.len()).max().unwrap_or(3).max(3);
    let mut out = String::new();
    for key in keys {
        out.push_str(&format!("{}\n", key.describe()));
        out.push_str(&format!(
            "  {:<width$} {:>3}  {:<14} {:>9} {:>9} {:>12}  {}\n",
            "RUN", "#", "OUTCOME", "PREDICTED", "MEASURED", "TOKENS/S", "STEPS"
        ));
        for o in all.iter().filter(|o| o.key == key) {
            let gib = |x: Option<f64>| x.map_or("-".to_string(), |g| format!("{g:.1}"));
            out.push_str(&format!(
                "  {:<width$} {:>3}  {:<14} {:>9} {:>9} {:>12}  {}\n",
                o.run,
                o.attempt,
                o.outcome.name(),
                gib(o
                    .predicted
                    .as_ref()
                    .and_then(|p| p.reserved_gib.or(Some(p.peak_gib)))),
                gib(o
                    .measured
                    .as_ref()
                    .and_then(|m| m.peak_gib())
                    .or(o.failed_demand_gib)),
                o.measured
                    .as_ref()
                    .and_then(|m| m.tokens_per_s)
                    .map_or("-".to_string(), |t| format!("{t:.0}")),
                o.step
            ));
        }
    }
    out.push_str(&format!("store: {}\n", store.path().display()));
    std::io::stdout().write_all(out.as_bytes())?;
    Ok(done)
}
