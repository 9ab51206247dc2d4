//! `orch render`, `orch profiles`, `orch experiments`, `orch ladder`: looking at configuration.

use std::path::PathBuf;

use anyhow::Context;

use crate::cli::{ConfigArgs, LadderArgs, ListArgs, RenderArgs};
use orch_classify::FailureClass;
use orch_core::config::experiment::Experiment;
use orch_core::config::ladder::Step;
use orch_core::config::profile::Profile;
use orch_core::config::{Catalog, Kind};
use orch_core::error::{UsageError, code};
use orch_core::plan::{ChangeRecord, Plan, Setup, class_path, linear_path};
use orch_core::render::AttemptInfo;

/// `name`'s setup and first plan; a sweep's name is refused, these commands show one experiment.
pub(crate) fn load_one(
    catalog: &Catalog,
    name: &str,
    config: &ConfigArgs,
) -> anyhow::Result<(Setup, Plan)> {
    let experiment = one_experiment(catalog, name)?;
    let profile = config.profile.as_deref();
    Ok(Setup::load(catalog, experiment, profile, &config.sets)?)
}

fn one_experiment(catalog: &Catalog, name: &str) -> anyhow::Result<Experiment> {
    let mut found = Experiment::find(catalog, name)?;
    if found.len() > 1 {
        let names: Vec<String> = found.iter().map(|e| e.name.clone()).collect();
        return Err(UsageError(format!(
            "`{name}` is a sweep; name one member: {}",
            names.join(", ")
        ))
        .into());
    }
    Ok(found.remove(0))
}

/// The estimator's verdict on a plan in one line (`predicted peak 90.52 of 79.18 GiB: does not
/// fit`), or nothing when the template has no estimator.
fn predicted(setup: &Setup, plan: &Plan) -> Option<String> {
    let est = orch_core::estimate::estimate_plan(setup, plan).ok()?;
    Some(format!(
        "predicted peak {:.2} of {:.2} GiB per GPU: {}",
        est.gpu_peak_gib(),
        est.estimate.capacity_gib,
        est.fit.as_str()
    ))
}

/// `orch render`: write one experiment's job files (optionally after N ladder steps).
pub fn render(catalog: &Catalog, args: RenderArgs) -> anyhow::Result<u8> {
    let (setup, base) = load_one(catalog, &args.experiment, &args.config)?;
    base.check(&setup)?;
    let plan = if args.step == 0 {
        base
    } else {
        let path = linear_path(&setup, &base)?;
        let (step, plan, changes) = path.get(args.step - 1).ok_or_else(|| {
            UsageError(format!(
                "--step {}: ladder {} has {} steps",
                args.step,
                base.ladder,
                path.len()
            ))
        })?;
        // A step that changes nothing still counts (N is a place in the file, as `orch ladder`
        // numbers it); say so rather than render the same files silently.
        if changes.is_empty() {
            let why = match &step.when {
                Some(when) if !plan.meets(step, &setup).unwrap_or(true) => {
                    format!("applies only where `{when}` holds, not here")
                }
                _ => "changes nothing from here".to_string(),
            };
            let previous = match args.step - 1 {
                0 => "as written".to_string(),
                n => format!("after step {n}"),
            };
            eprintln!(
                "note: step {} ({}) {why}; the files are those {previous}",
                args.step, step.name
            );
        }
        plan.check(&setup)?;
        plan.clone()
    };
    let out = args
        .out
        .unwrap_or_else(|| PathBuf::from("rendered").join(&plan.experiment));
    let out =
        std::path::absolute(&out).with_context(|| format!("cannot resolve {}", out.display()))?;
    let info = AttemptInfo {
        run_id: format!("{}-render", plan.experiment),
        attempt: 1,
        dir: out.clone(),
        write_dir: out.clone(),
        run_dir: out.clone(),
        job_name: format!("orch-{}-render", plan.experiment),
        simulate: args.simulate,
        checkpoint_dir: out.join("checkpoints"),
        devices: None,
    };
    // Created here so that a directory that cannot be made is named.
    std::fs::create_dir_all(&out).with_context(|| format!("cannot create {}", out.display()))?;
    let files = orch_core::render::render(catalog, &setup, &plan, &info)?;
    // Every value with where it came from, as each attempt of a run keeps it.
    let plan_file = out.join("plan.yaml");
    // The error names the file itself.
    orch_core::ledger::write_atomic(&plan_file, serde_yaml::to_string(&plan)?.as_bytes())?;
    if args.json {
        let json = serde_json::json!({
            "experiment": plan.experiment,
            "profile": plan.profile,
            "steps": plan.steps,
            "files": files,
            "plan": plan_file,
        });
        outln!("{}", serde_json::to_string_pretty(&json)?);
        return Ok(code::OK);
    }
    for path in files.iter().chain([&plan_file]) {
        outln!("{}", path.display());
    }
    Ok(code::OK)
}

/// `orch profiles`: a table (or JSON) of the hardware profiles.
pub fn profiles(catalog: &Catalog, args: ListArgs) -> anyhow::Result<u8> {
    // One broken profile is named on stderr; the others are still listed. Exit 2 says so.
    let mut rows = Vec::new();
    let mut broken = 0;
    for name in catalog.names(Kind::Profiles) {
        match Profile::load(catalog, &name) {
            Ok((profile, origin)) => rows.push((name, profile, origin)),
            Err(e) => {
                broken += 1;
                eprintln!("warning: profile `{name}` is not usable: {e}");
            }
        }
    }
    let status = if broken > 0 { code::USAGE } else { code::OK };
    if args.json {
        let json: Vec<_> = rows
            .iter()
            .map(|(name, p, origin)| serde_json::json!({"name": name, "origin": origin, "profile": p}))
            .collect();
        outln!("{}", serde_json::to_string_pretty(&json)?);
        return Ok(status);
    }
    outln!(
        "{:<10} {:<26} {:>9} {:>5}  {:<22} {:>7}  DESCRIPTION",
        "PROFILE",
        "GPU",
        "GPU GiB",
        "GPUS",
        "GRES",
        "MEM"
    );
    for (name, p, _) in rows {
        outln!(
            "{:<10} {:<26} {:>9} {:>5}  {:<22} {:>6}G  {}",
            name,
            p.gpu.model,
            p.gpu.memory_gib,
            p.slurm.gpus,
            format!("gpu:{}:{}", p.slurm.gres_type, p.slurm.gpus),
            p.slurm.mem_gb,
            p.description
        );
    }
    Ok(status)
}

/// The experiments `find` gave for a file's own name are a sweep's members.
fn file_is_sweep(found: &[Experiment]) -> bool {
    found.first().is_some_and(|e| e.swept.is_some())
}

/// `orch experiments`: every experiment name, sweeps with their members.
pub fn experiments(catalog: &Catalog, args: ListArgs) -> anyhow::Result<u8> {
    if args.json {
        // One object per experiment file: its members when it is a sweep, or why it is broken.
        let json: Vec<_> = catalog
            .names(Kind::Experiments)
            .into_iter()
            .map(|name| match Experiment::find(catalog, &name) {
                Ok(found) => {
                    let file = &found[0].file;
                    serde_json::json!({
                        "name": name,
                        "members": if file_is_sweep(&found) {
                            found.iter().map(|e| e.name.clone()).collect::<Vec<_>>()
                        } else {
                            Vec::new()
                        },
                        "description": file.description,
                        "template": file.template,
                        "profile": file.profile,
                        "model": file.model,
                        "origin": found[0].origin.to_string(),
                    })
                }
                Err(e) => serde_json::json!({"name": name, "error": e.to_string()}),
            })
            .collect();
        outln!("{}", serde_json::to_string_pretty(&json)?);
        return Ok(code::OK);
    }
    for n in Experiment::known(catalog) {
        outln!("{n}");
    }
    Ok(code::OK)
}

/// `orch ladder`: an experiment's ladder per failure class — the steps that answer it, taken
/// one after another in ladder order — with what each changes and its predicted peak.
pub fn ladder(catalog: &Catalog, args: LadderArgs) -> anyhow::Result<u8> {
    let (setup, base) = load_one(catalog, &args.experiment, &args.config)?;
    let mut classes: Vec<FailureClass> = Vec::new();
    for step in &setup.ladder.steps {
        for c in &step.answers {
            if !classes.contains(c) {
                classes.push(*c);
            }
        }
    }
    let mut paths = Vec::new();
    for class in &classes {
        paths.push((*class, class_path(&setup, &base, Some(*class))?));
    }
    if args.json {
        let step_json = |(step, plan, changes): &(Step, Plan, Vec<ChangeRecord>)| {
            let est = orch_core::estimate::estimate_plan(&setup, plan).ok();
            serde_json::json!({
                "step": step.name,
                "answers": step.answers.iter().map(|c| c.as_str()).collect::<Vec<_>>(),
                "changes_semantics": step.changes_semantics,
                "why": step.why,
                "changes": changes.iter().map(|c| c.to_string()).collect::<Vec<_>>(),
                "gpu_peak_gib": est.as_ref().map(|e| (e.gpu_peak_gib() * 100.0).round() / 100.0),
                "verdict": est.as_ref().map(|e| e.fit),
                "refused": plan.check(&setup).err().map(|e| e.to_string()),
            })
        };
        let json = serde_json::json!({
            "ladder": base.ladder,
            "origin": setup.ladder_origin.to_string(),
            "experiment": base.experiment,
            "profile": base.profile,
            "description": setup.ladder.description,
            "classes": paths
                .iter()
                .map(|(c, path)| {
                    let steps: Vec<serde_json::Value> = path.iter().map(step_json).collect();
                    (c.as_str().to_string(), serde_json::Value::from(steps))
                })
                .collect::<serde_json::Map<_, _>>(),
        });
        outln!("{}", serde_json::to_string_pretty(&json)?);
        return Ok(code::OK);
    }
    outln!(
        "ladder {} ({}) for {} on {}: {}",
        base.ladder,
        setup.ladder_origin,
        base.experiment,
        base.profile,
        setup.ladder.description
    );
    outln!(
        "The ladder is a menu: after a failure orch takes the best combination of the steps that answer it (docs/PLANNER.md). Below, per failure class, those steps taken one after another. (`orch render --step N` applies the first N steps of the file, whatever they answer.)"
    );
    if let Some(line) = predicted(&setup, &base) {
        outln!("\n as written: {line}");
    }
    for (class, path) in &paths {
        outln!("\n{}:", class.as_str());
        for (i, (step, plan, changes)) in path.iter().enumerate() {
            outln!(
                "{:>3}. {}{}",
                i + 1,
                step.name,
                if step.changes_semantics {
                    "  [changes training semantics]"
                } else {
                    ""
                }
            );
            if !step.why.is_empty() {
                outln!("     {}", step.why);
            }
            if changes.is_empty() {
                match &step.when {
                    Some(when) if !plan.meets(step, &setup).unwrap_or(true) => {
                        outln!("     (applies only where `{when}` holds: not here)")
                    }
                    _ => outln!("     (changes nothing from here)"),
                }
            }
            for c in changes {
                outln!("     {c}");
            }
            if let Some(line) = predicted(&setup, plan) {
                outln!("     → {line}");
            }
            if let Err(e) = plan.check(&setup) {
                outln!(
                    "     ! the trainer would refuse this configuration; orch passes over it:\n     {}",
                    e.to_string().replace('\n', "\n     ")
                );
            }
        }
    }
    Ok(code::OK)
}
