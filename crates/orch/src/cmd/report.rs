//! `orch report`: find the runs asked for (ids, or an experiment's or sweep's newest runs),
//! read their records from the ledger and write the page `crate::report` renders.

use std::path::PathBuf;

use anyhow::Context;

use crate::cli::ReportArgs;
use orch_core::config::Catalog;
use orch_core::config::experiment::Experiment;
use orch_core::error::{UsageError, code};
use orch_core::ledger::{Ledger, RunRecord};

pub fn report(catalog: &Catalog, ledger: &Ledger, args: ReportArgs) -> anyhow::Result<u8> {
    let (records, name) = find(catalog, ledger, &args.runs)?;
    for r in &records {
        for damage in &r.damage {
            eprintln!("warning: run {}: {damage}", r.run);
        }
    }
    let html = crate::report::render(
        &records,
        &ledger.root().display().to_string(),
        std::time::SystemTime::now(),
    )?;
    let out = args
        .out
        .unwrap_or_else(|| PathBuf::from(format!("report-{name}.html")));
    if out.as_os_str() == "-" {
        use std::io::Write as _;
        std::io::stdout().write_all(html.as_bytes())?;
    } else {
        orch_core::ledger::write_atomic(&out, html.as_bytes())
            .with_context(|| format!("cannot write the report to {}", out.display()))?;
        let running = records
            .iter()
            .filter(|r| r.state == orch_core::ledger::RunState::Running)
            .count();
        eprintln!(
            "wrote {} ({} run{}, {} KiB){}",
            out.display(),
            records.len(),
            if records.len() == 1 { "" } else { "s" },
            html.len().div_ceil(1024),
            if running > 0 {
                format!("; {running} still running, shown so far")
            } else {
                String::new()
            }
        );
        outln!("{}", out.display());
    }
    Ok(code::OK)
}

/// The records the arguments name, in order, and a name for the page's file. A name that is
/// an experiment or a sweep (in the catalog) stands for the newest run of it or of each of its
/// members; anything else is a run id or a unique prefix of one. No argument: every run.
fn find(
    catalog: &Catalog,
    ledger: &Ledger,
    names: &[String],
) -> anyhow::Result<(Vec<RunRecord>, String)> {
    if names.is_empty() {
        let mut records = Vec::new();
        for id in ledger.ids() {
            match ledger.open(&id).and_then(|d| d.record()) {
                Ok(r) => records.push(r),
                Err(e) => eprintln!("warning: run {id} skipped: {e:#}"),
            }
        }
        // A sweep's members in their order (seed2 before seed10), each submission together.
        records.sort_by(|a, b| {
            (a.created.get(..19), natural(&a.experiment))
                .cmp(&(b.created.get(..19), natural(&b.experiment)))
        });
        if records.is_empty() {
            return Err(UsageError(format!(
                "no runs in {} to report on",
                ledger.root().display()
            ))
            .into());
        }
        return Ok((records, "runs".into()));
    }
    let mut records: Vec<RunRecord> = Vec::new();
    let mut experiments: Option<Vec<(String, String)>> = None;
    for name in names {
        let picked = match Experiment::find(catalog, name).ok() {
            Some(members) => {
                // Which experiment each run ran, read once from the index.
                let index = experiments.get_or_insert_with(|| {
                    ledger
                        .summaries()
                        .into_iter()
                        .filter_map(Result::ok)
                        .map(|s| (s.experiment, s.run))
                        .collect()
                });
                let mut picked = Vec::new();
                let mut missing = Vec::new();
                for m in &members {
                    // Run ids sort by creation time: the last is the newest.
                    match index.iter().rev().find(|(e, _)| *e == m.name) {
                        Some((_, run)) => picked.push(run.clone()),
                        None => missing.push(m.name.clone()),
                    }
                }
                if picked.is_empty() {
                    return Err(UsageError(format!(
                        "no run of `{name}` in {} (submit it with `orch submit {name}`)",
                        ledger.root().display()
                    ))
                    .into());
                }
                if !missing.is_empty() {
                    eprintln!(
                        "warning: no run yet of {} (not on the page)",
                        missing.join(", ")
                    );
                }
                picked
            }
            None => vec![ledger.open(name)?.id],
        };
        for id in picked {
            if records.iter().any(|r| r.run == id) {
                continue;
            }
            records.push(ledger.open(&id)?.record()?);
        }
    }
    let name = match (names, records.as_slice()) {
        ([_], [one]) => one.run.clone(),
        ([name], _) => name.clone(),
        _ => "runs".into(),
    };
    Ok((records, name))
}

/// A name with its trailing number as a number, so `seed2` sorts before `seed10`.
fn natural(name: &str) -> (&str, u64) {
    let digits = name.len() - name.trim_end_matches(|c: char| c.is_ascii_digit()).len();
    let (stem, number) = name.split_at(name.len() - digits);
    (stem, number.parse().unwrap_or(0))
}
