//! `orch render`, `orch profiles`, `orch experiments`, `orch ladder`: looking at configuration.

use std::path::PathBuf;

use anyhow::Context;

use crate::cli::{ConfigArgs, LadderArgs, ListArgs, RenderArgs};
use orch_core::config::experiment::Experiment;
use orch_core::config::profile::Profile;
use orch_core::config::{Catalog, Kind};
use orch_core::error::{UsageError, code};
use orch_core::plan::{Plan, Setup, linear_path};
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
        let (_, plan, _) = path.get(args.step - 1).ok_or_else(|| {
            UsageError(format!(
                "--step {}: ladder {} has {} steps",
                args.step,
                base.ladder,
                path.len()
            ))
        })?;
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
    };
    for path in orch_core::render::render(catalog, &setup, &plan, &info)? {
        outln!("{}", path.display());
    }
    // Every value with where it came from, as each attempt of a run keeps it.
    let plan_file = out.join("plan.yaml");
    orch_core::ledger::write_atomic(&plan_file, serde_yaml::to_string(&plan)?.as_bytes())
        .with_context(|| format!("cannot write {}", plan_file.display()))?;
    outln!("{}", plan_file.display());
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

/// `orch experiments`: every experiment name, sweeps with their members.
pub fn experiments(catalog: &Catalog, args: ListArgs) -> anyhow::Result<u8> {
    let names = Experiment::known(catalog);
    if args.json {
        outln!("{}", serde_json::to_string_pretty(&names)?);
    } else {
        for n in names {
            outln!("{n}");
        }
    }
    Ok(code::OK)
}

/// `orch ladder`: an experiment's ladder walked in file order, with what each step changes.
pub fn ladder(catalog: &Catalog, args: LadderArgs) -> anyhow::Result<u8> {
    let (setup, base) = load_one(catalog, &args.experiment, &args.config)?;
    outln!(
        "ladder {} ({}) for {} on {}: {}",
        base.ladder,
        setup.ladder_origin,
        base.experiment,
        base.profile,
        setup.ladder.description
    );
    outln!(
        "Steps are taken in this order, each only for the failures it answers; `--step N` renders the first N."
    );
    if let Some(line) = predicted(&setup, &base) {
        outln!("\n as written: {line}");
    }
    let path = linear_path(&setup, &base)?;
    for (i, (step, plan, changes)) in path.iter().enumerate() {
        let answers: Vec<&str> = step.answers.iter().map(|c| c.as_str()).collect();
        outln!(
            "\n{:>2}. {}  [answers: {}]{}",
            i + 1,
            step.name,
            answers.join(", "),
            if step.changes_semantics {
                "  [changes training semantics]"
            } else {
                ""
            }
        );
        if !step.why.is_empty() {
            outln!("    {}", step.why);
        }
        if changes.is_empty() {
            outln!("    (changes nothing from here)");
        }
        for c in changes {
            outln!("    {c}");
        }
        if let Some(line) = predicted(&setup, plan) {
            outln!("    → {line}");
        }
        if let Err(e) = plan.check(&setup) {
            outln!(
                "    ! the trainer would refuse this configuration; orch passes over it:\n    {}",
                e.to_string().replace('\n', "\n    ")
            );
        }
    }
    Ok(code::OK)
}
