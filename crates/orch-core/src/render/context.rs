//! What templates see: one [`Context`] per attempt, built from the setup, the plan and the
//! attempt. Its field names are the variables template authors write (`experiment.model`,
//! `resources.gpus`, `config.data.train_batch_size`, `run.dir`, ...), so they are part of the
//! template interface and do not change lightly.
//!
//! The values that are already text of their kind are prepared here, marked safe for the
//! [writer](super::script): each override's `arg` (a shell word), the `setup:` lines (shell, one
//! line each) and `config_yaml` (a YAML document). Every other value is plain data, which a
//! template writes through a filter. Values that cannot go where every template puts them are
//! refused here, naming their key: a `setup:` line that is not one line, a resource that cannot
//! go on an `#SBATCH` line.

use std::collections::BTreeMap;

use minijinja::Value;
use serde::Serialize;

use super::AttemptInfo;
use super::arguments::{ArgumentError, argument};
use crate::config::experiment::scalar_text;
use crate::config::jinja::{directive, to_value};
use crate::config::profile::Resources;
use crate::plan::{Plan, Setup, insert_dotted, trainer_value};

/// One trainer override: its key, its value as text, and `arg`, the whole `key=value` as one
/// shell word in the trainer's own grammar (the template's `override_syntax`), safe to write.
#[derive(Serialize)]
struct Override {
    key: String,
    value: String,
    arg: Value,
}

/// The variables every template of an attempt is rendered with.
#[derive(Serialize)]
pub(super) struct Context<'a> {
    experiment: BTreeMap<&'static str, Value>,
    profile: BTreeMap<&'static str, Value>,
    resources: &'a Resources,
    overrides: Vec<Override>,
    /// Trainer keys (defaults and overrides) as nested values: `config.data.train_batch_size`.
    config: serde_json::Value,
    /// The overrides as a nested YAML document, for trainers that read a config file.
    config_yaml: Value,
    env: BTreeMap<String, String>,
    /// Shell lines the job runs before the trainer: the profile's `setup:`, then the
    /// experiment's, written as they are (each one line).
    setup: Vec<Value>,
    /// The container (experiment's, else profile's), with `mounts` as `host:container` pairs.
    container: Option<serde_json::Value>,
    sim_env: BTreeMap<String, String>,
    simulate: bool,
    orch_bin: String,
    resume: bool,
    checkpoint_dir: String,
    /// The project directory (where orch was started, or `--config-dir`), absolute, when the
    /// job runs on this machine: a relative path of the project's (torchrun's `vars.entry`)
    /// is read from there, as the job itself runs in the attempt's directory. None on a remote
    /// host, where the job's shell reads it from its home.
    project_dir: Option<String>,
    run: BTreeMap<&'static str, Value>,
}

impl<'a> Context<'a> {
    pub(super) fn new(
        setup: &'a Setup,
        plan: &'a Plan,
        info: &AttemptInfo,
        project_dir: &std::path::Path,
    ) -> Result<Self, String> {
        let overrides = trainer_overrides(setup, plan, info);
        let syntax = setup.template.spec.override_syntax;
        let args = overrides
            .iter()
            .map(|(k, v)| {
                Ok(Override {
                    key: k.clone(),
                    value: trainer_value(v),
                    arg: super::script::written(argument(syntax, k, v)?),
                })
            })
            .collect::<Result<Vec<_>, ArgumentError>>()
            .map_err(|e| e.to_string())?;
        resource_problems(&plan.resources)?;
        Ok(Context {
            experiment: experiment_values(setup, plan),
            profile: profile_values(setup, plan),
            resources: &plan.resources,
            overrides: args,
            config: plan.config_tree(setup),
            config_yaml: super::script::written(nested_yaml(&overrides)),
            env: plan
                .env
                .iter()
                .map(|(k, s)| (k.clone(), scalar_text(&s.value)))
                .collect(),
            setup: setup_lines(setup)?,
            container: setup.container().map(|c| {
                let mut v = serde_json::to_value(c).unwrap_or_default();
                v["mounts"] = c.mount_pairs().into();
                v
            }),
            sim_env: sim_env(setup, plan),
            simulate: info.simulate,
            orch_bin: orch_bin(info),
            resume: plan.resume,
            checkpoint_dir: info.checkpoint_dir.display().to_string(),
            project_dir: (info.dir == info.write_dir).then(|| {
                std::path::absolute(project_dir)
                    .unwrap_or_else(|_| project_dir.to_path_buf())
                    .display()
                    .to_string()
            }),
            run: run_values(plan, info),
        })
    }
}

/// The `setup:` lines, the profile's then the experiment's, as shell to write as it is: each
/// must be one line (as loading the profile and the experiment checked already; checked again
/// where they become a script).
fn setup_lines(setup: &Setup) -> Result<Vec<Value>, String> {
    let (profile, experiment) = (&setup.profile.setup, &setup.experiment.file.setup);
    let mut problems = crate::config::profile::setup_problems("profile setup", profile);
    problems.extend(crate::config::profile::setup_problems(
        "experiment setup",
        experiment,
    ));
    if !problems.is_empty() {
        return Err(problems.join("; "));
    }
    Ok(profile
        .iter()
        .chain(experiment)
        .map(|l| super::script::written(l.clone()))
        .collect())
}

/// The resources that go on `#SBATCH` lines as text, each checked as the template's
/// `directive` filter will, so that a refusal names the key rather than a template line.
fn resource_problems(r: &Resources) -> Result<(), String> {
    let mut fields: Vec<(String, &str)> = vec![
        ("resources.partition".into(), &r.partition),
        ("resources.gres_type".into(), &r.gres_type),
        ("resources.time".into(), &r.time),
    ];
    for (name, value) in [
        ("account", &r.account),
        ("qos", &r.qos),
        ("constraint", &r.constraint),
        ("reservation", &r.reservation),
    ] {
        if let Some(v) = value {
            fields.push((format!("resources.{name}"), v));
        }
    }
    for (i, v) in r.exclude.iter().enumerate() {
        fields.push((format!("resources.exclude[{i}]"), v));
    }
    for (i, v) in r.extra.iter().enumerate() {
        fields.push((format!("resources.extra[{i}]"), v));
    }
    let problems: Vec<String> = fields
        .into_iter()
        .filter_map(|(key, v)| {
            directive(Value::from(v))
                .err()
                .map(|e| format!("{key}: {}", e.detail().unwrap_or_default()))
        })
        .collect();
    if problems.is_empty() {
        Ok(())
    } else {
        Err(problems.join("; "))
    }
}

/// The plan's effective overrides, plus the checkpoint directory under the template's
/// checkpoint key, and its subdirectories under the template's `checkpoint_subdirs` keys,
/// unless the plan sets those keys itself; a tracker name orch set from the experiment's name
/// carries the attempt (`attempt_name_keys`).
fn trainer_overrides(
    setup: &Setup,
    plan: &Plan,
    info: &AttemptInfo,
) -> BTreeMap<String, serde_yaml::Value> {
    let mut overrides = plan.effective_overrides(setup);
    if let Some(key) = &setup.template.spec.checkpoint_key
        && !plan.overrides.contains_key(key)
    {
        overrides.insert(
            key.clone(),
            info.checkpoint_dir.display().to_string().into(),
        );
    }
    for key in &setup.template.spec.attempt_name_keys {
        if let Some(v) = overrides.get_mut(key)
            && v.as_str() == Some(setup.experiment.name.as_str())
        {
            *v = format!("{}-a{}", setup.experiment.name, info.attempt).into();
        }
    }
    for (key, sub) in &setup.template.spec.checkpoint_subdirs {
        if !plan.overrides.contains_key(key) {
            overrides.insert(
                key.clone(),
                info.checkpoint_dir.join(sub).display().to_string().into(),
            );
        }
    }
    overrides
}

/// Overrides as one nested YAML document; `+` (a key added on purpose) is not part of the key.
fn nested_yaml(overrides: &BTreeMap<String, serde_yaml::Value>) -> String {
    let mut tree = serde_yaml::Value::Mapping(Default::default());
    for (k, v) in overrides {
        insert_dotted(&mut tree, k.trim_start_matches('+'), v.clone());
    }
    serde_yaml::to_string(&tree).unwrap_or_default()
}

fn experiment_values(setup: &Setup, plan: &Plan) -> BTreeMap<&'static str, Value> {
    let file = &setup.experiment.file;
    BTreeMap::from([
        ("name", Value::from(setup.experiment.name.clone())),
        ("file", Value::from(setup.experiment.file_name.clone())),
        ("description", Value::from(file.description.clone())),
        ("model", to_value(&file.model)),
        ("train_files", to_value(&file.train_files)),
        ("val_files", to_value(&file.val_files)),
        ("seed", to_value(file.seed)),
        ("vars", to_value(&plan.vars)),
    ])
}

fn profile_values(setup: &Setup, plan: &Plan) -> BTreeMap<&'static str, Value> {
    BTreeMap::from([
        ("name", Value::from(plan.profile.clone())),
        (
            "description",
            Value::from(setup.profile.description.clone()),
        ),
        ("gpu", to_value(&setup.profile.gpu)),
        ("host", to_value(&setup.profile.host)),
    ])
}

/// What the simulated trainer needs to behave like the profile's hardware.
fn sim_env(setup: &Setup, plan: &Plan) -> BTreeMap<String, String> {
    let gpu = &setup.profile.gpu;
    let version = setup.experiment.file.trainer_version.as_ref();
    let mut env = BTreeMap::from([
        ("ORCH_SIM_GPU_NAME".to_string(), gpu.model.clone()),
        (
            "ORCH_SIM_GPU_MEM_GIB".to_string(),
            gpu.memory_gib.to_string(),
        ),
        ("ORCH_SIM_GPUS".to_string(), plan.resources.gpus.to_string()),
        (
            "ORCH_SIM_HOST_MEM_GIB".to_string(),
            plan.resources.mem_gb.to_string(),
        ),
    ]);
    // The release the experiment states, which the simulated trainer behaves as.
    if let Some(v) = version {
        env.insert("ORCH_SIM_TRAINER_VERSION".to_string(), v.text.clone());
    }
    env
}

fn run_values(plan: &Plan, info: &AttemptInfo) -> BTreeMap<&'static str, Value> {
    BTreeMap::from([
        ("id", Value::from(info.run_id.clone())),
        ("attempt", Value::from(info.attempt)),
        ("dir", Value::from(info.dir.display().to_string())),
        ("run_dir", Value::from(info.run_dir.display().to_string())),
        ("job_name", Value::from(info.job_name.clone())),
        ("step_name", Value::from(plan.step_name())),
        ("steps", to_value(&plan.steps)),
        // `0,1,2,3`, or none: the job is not given GPUs by orch (Slurm gives them).
        (
            "devices",
            info.devices.as_deref().map_or(Value::from(()), |d| {
                Value::from(crate::gpus::slots::list(d))
            }),
        ),
    ])
}

/// The `orch` the job runs for the simulator. Here, this very binary; on a remote host (the job
/// sees another directory than the one written here), whatever ORCH_REMOTE_ORCH names, else
/// the `orch` on the host's PATH.
fn orch_bin(info: &AttemptInfo) -> String {
    let remote = info.dir != info.write_dir;
    match std::env::var("ORCH_REMOTE_ORCH") {
        Ok(bin) if remote => bin,
        _ if remote => "orch".into(),
        _ => std::env::current_exe()
            .map(|p| p.display().to_string())
            .unwrap_or_else(|_| "orch".into()),
    }
}
