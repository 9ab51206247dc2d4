//! Data is never run (issue 41, F7): a string from a profile, an experiment, `--set` or the runs
//! directory's path reaches the job's scripts as data, or orch refuses it naming its key.
//!
//! Every experiment under `experiments/` is rendered on every profile, in three arrangements (no
//! container, the profile's Apptainer container, the experiment's Pyxis container), with each
//! optional string field filled in. The fields are every string leaf of the profile and the
//! experiment — values and list items, and the entry names of the maps the user names (`env`,
//! `container.env`, `overrides`, `vars`, `resources`) — plus the runs directory's path and a few
//! `--set`s. Each gets each payload of [`PAYLOADS`] (a newline then a command, `$(…)`,
//! backquotes, `;`, a closing single or double quote), each touching a canary named after the
//! payload and the field.
//!
//! [`expected`] says, per field and payload, what orch must do:
//!
//! - refuse, with an error that names the key (nothing is rendered, so nothing is submitted);
//! - render scripts that run as data: bash runs `job.sbatch` with stand-ins first on PATH for the
//!   trainers and for `srun`/`apptainer` (which run the command they wrap); the job must exit 0
//!   and reach the trainer (no early exit can hide a payload), its `#SBATCH` lines must come
//!   before any command, and no canary may exist afterwards;
//! - for `setup:` lines, shell by design, refuse a newline and run the rest: `$(…)`, backquotes
//!   and `;` must fire their canary — the positive control that shows a canary can appear.
//!
//! The fields that must run are given their payload together, one rendering per experiment ×
//! profile × arrangement × payload (the canary's name says which field ran); each field that
//! must be refused, and each `setup:` line, is tried alone, on each experiment's own profile.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;

use orch_core::config::experiment::Experiment;
use orch_core::config::{Catalog, Kind};
use orch_core::plan::{SetArg, Setup};
use orch_core::render::{AttemptInfo, render_to_strings};
use serde_yaml::{Mapping, Value};

use crate::support::{Orch, write_exe};

/// (name, text appended to a field's value; `{}` becomes the canary's name). A `#` ends the
/// command where the rest of the value (`/RUN` after the runs directory's name) would spoil it.
const PAYLOADS: &[(&str, &str)] = &[
    ("newline", "\ntouch $CANARY_DIR/{} #"),
    ("subst", "$(touch $CANARY_DIR/{})"),
    ("backquote", "`touch $CANARY_DIR/{}`"),
    ("semicolon", "; touch $CANARY_DIR/{} #"),
    ("single-quote", "'; touch $CANARY_DIR/{}; '"),
    ("double-quote", "\"; touch $CANARY_DIR/{}; \""),
];

/// The payload `name` for the field tagged `tag`: its canary is `<name>-<tag>`.
fn payload_text(name: &str, tag: usize) -> String {
    let (_, text) = PAYLOADS.iter().find(|(n, _)| *n == name).unwrap();
    text.replace("{}", &format!("{name}-f{tag}"))
}

/// One step of a path into a YAML document.
#[derive(Clone, Debug)]
enum Step {
    Key(String),
    Index(usize),
}

/// A string leaf: the value at `path`, or (`entry_name`) the name of the map entry at `path`.
#[derive(Clone, Debug)]
struct Field {
    path: Vec<Step>,
    entry_name: bool,
}

impl Field {
    /// `profile.slurm.partition`, `experiment.env{ORCH_TEST_ENV}` (the name itself),
    /// `profile.setup[0]`.
    fn label(&self, doc: &str) -> String {
        let mut s = doc.to_string();
        for (i, step) in self.path.iter().enumerate() {
            match step {
                Step::Key(k) if self.entry_name && i == self.path.len() - 1 => {
                    s.push_str(&format!("{{{k}}}"))
                }
                Step::Key(k) => s.push_str(&format!(".{k}")),
                Step::Index(n) => s.push_str(&format!("[{n}]")),
            }
        }
        s
    }

    /// The key an error must name: the value's (its list's for an item), or the entry's name.
    fn name(&self) -> String {
        self.path
            .iter()
            .rev()
            .find_map(|s| match s {
                Step::Key(k) => Some(k.clone()),
                Step::Index(_) => None,
            })
            .unwrap()
    }
}

/// Every string leaf of `doc`, and the entry names of the maps at the dotted paths `named`
/// (`overrides.*`: each map under `overrides`), except under the paths `skip`.
fn fields(doc: &Value, named: &[&str], skip: &[&str]) -> Vec<Field> {
    fn walk(v: &Value, path: &mut Vec<Step>, out: &mut Vec<Field>, named: &[&str], skip: &[&str]) {
        let dotted = path
            .iter()
            .map(|s| match s {
                Step::Key(k) => k.clone(),
                Step::Index(_) => "[]".into(),
            })
            .collect::<Vec<_>>()
            .join(".");
        if skip.contains(&dotted.as_str()) {
            return;
        }
        match v {
            Value::String(_) => out.push(Field {
                path: path.clone(),
                entry_name: false,
            }),
            Value::Sequence(items) => {
                for (i, item) in items.iter().enumerate() {
                    path.push(Step::Index(i));
                    walk(item, path, out, named, skip);
                    path.pop();
                }
            }
            Value::Mapping(map) => {
                let names_entries = named.iter().any(|n| {
                    *n == dotted
                        || n.strip_suffix(".*").is_some_and(|p| {
                            dotted
                                .strip_prefix(&format!("{p}."))
                                .is_some_and(|rest| !rest.contains('.'))
                        })
                });
                for (k, item) in map {
                    path.push(Step::Key(k.as_str().expect("string keys").to_string()));
                    if names_entries {
                        out.push(Field {
                            path: path.clone(),
                            entry_name: true,
                        });
                    }
                    walk(item, path, out, named, skip);
                    path.pop();
                }
            }
            _ => {}
        }
    }
    let mut out = Vec::new();
    walk(doc, &mut Vec::new(), &mut out, named, skip);
    out
}

/// Put `payload` in `doc` at `field`: appended to the value, or, for an entry's name, as one
/// more entry named `<name><payload>` with the same value (the entry itself stays, so a value
/// given a payload of its own keeps its place).
fn inject(doc: &mut Value, field: &Field, payload: &str) {
    let (last, parents) = field.path.split_last().unwrap();
    let mut v = doc;
    for step in parents {
        v = match step {
            Step::Key(k) => v.get_mut(k.as_str()).unwrap(),
            Step::Index(i) => v.get_mut(*i).unwrap(),
        };
    }
    let leaf = match (last, field.entry_name) {
        (Step::Key(k), true) => {
            let map = v.as_mapping_mut().unwrap();
            let item = map[k.as_str()].clone();
            map.insert(Value::from(format!("{k}{payload}")), item);
            return;
        }
        (Step::Key(k), false) => v.get_mut(k.as_str()).unwrap(),
        (Step::Index(i), _) => v.get_mut(*i).unwrap(),
    };
    *leaf = Value::from(format!("{}{payload}", leaf.as_str().unwrap()));
}

fn map(pairs: &[(&str, Value)]) -> Value {
    let mut m = Mapping::new();
    for (k, v) in pairs {
        m.insert(Value::from(*k), v.clone());
    }
    Value::Mapping(m)
}

fn set(doc: &mut Value, key: &str, value: Value) {
    doc.as_mapping_mut()
        .unwrap()
        .insert(Value::from(key), value);
}

/// Add `entry: value` to the map at `key` (made if missing).
fn add(doc: &mut Value, key: &str, entry: &str, value: Value) {
    let m = doc.as_mapping_mut().unwrap();
    if !m.contains_key(key) {
        m.insert(Value::from(key), Value::Mapping(Mapping::new()));
    }
    m.get_mut(key)
        .unwrap()
        .as_mapping_mut()
        .unwrap()
        .insert(Value::from(entry), value);
}

fn builtin(catalog: &Catalog, kind: Kind, name: &str) -> Value {
    let doc = catalog
        .read(kind, &format!("{name}.yaml"))
        .unwrap()
        .unwrap();
    serde_yaml::from_str(&doc.text).unwrap()
}

/// A profile with each optional string field set to a value a real one could hold.
fn full_profile(shipped: &Value) -> Value {
    let mut p = shipped.clone();
    let slurm = p.get_mut("slurm").unwrap();
    set(slurm, "account", "proj42".into());
    set(slurm, "qos", "normal".into());
    set(slurm, "constraint", "a100&ib".into());
    set(slurm, "reservation", "maint".into());
    set(slurm, "exclude", Value::Sequence(vec!["node07".into()]));
    set(
        slurm,
        "extra",
        Value::Sequence(vec!["--mail-type=END".into()]),
    );
    add(
        &mut p,
        "env",
        "ORCH_TEST_PROFILE_ENV",
        "profile value".into(),
    );
    set(&mut p, "setup", Value::Sequence(vec!["true".into()]));
    p
}

fn apptainer() -> Value {
    map(&[
        ("image", "docker://nvcr.io/nvidia/pytorch:24.05-py3".into()),
        ("runtime", "apptainer".into()),
        ("mounts", Value::Sequence(vec!["/scratch".into()])),
        (
            "env",
            map(&[("ORCH_TEST_CONTAINER_ENV", "in container".into())]),
        ),
    ])
}

fn pyxis() -> Value {
    map(&[
        ("image", "nvcr.io#nvidia/pytorch:24.05-py3".into()),
        ("runtime", "pyxis".into()),
        ("mounts", Value::Sequence(vec!["/data:/data".into()])),
        (
            "env",
            map(&[("ORCH_TEST_CONTAINER_ENV", "in container".into())]),
        ),
    ])
}

/// A string trainer key each template accepts, with a value it takes.
fn string_override(template: &str) -> (&'static str, &'static str) {
    match template {
        "verl-grpo" => ("trainer.project_name", "orch-test"),
        "areal-grpo" => ("trial_name", "trial1"),
        "torchrun-yaml" => ("model.name", "gsa-512m"),
        "rl-swarm" => ("game_manager.data_manager.system_prompt_id", "default"),
        other => panic!("no string override known for template {other}: add one"),
    }
}

/// An experiment with each optional string field set, every variable of its template and a
/// string trainer override.
fn full_experiment(shipped: &Value, catalog: &Catalog) -> Value {
    let mut e = shipped.clone();
    let template = e["template"].as_str().unwrap().to_string();
    for (k, v) in &catalog.template(&template).unwrap().spec.vars {
        if e.get("vars")
            .and_then(|vars| vars.get(k.as_str()))
            .is_none()
        {
            add(&mut e, "vars", k, v.clone());
        }
    }
    add(
        &mut e,
        "env",
        "ORCH_TEST_EXPERIMENT_ENV",
        "experiment value".into(),
    );
    set(&mut e, "setup", Value::Sequence(vec!["true".into()]));
    set(&mut e, "on_event", Value::Sequence(vec!["true".into()]));
    let (key, value) = string_override(&template);
    add(&mut e, "overrides", key, value.into());
    e
}

/// Where a payload goes.
#[derive(Clone)]
enum Target {
    Profile(Field),
    Experiment(Field),
    /// Appended to the name of the runs directory.
    RunsDir,
    /// `--set KEY=x` and the payload.
    Set(String),
}

impl Target {
    /// The field's label, and the key an error refusing it must name.
    fn label(&self) -> (String, String) {
        match self {
            Target::Profile(f) => (f.label("profile"), f.name()),
            Target::Experiment(f) => (f.label("experiment"), f.name()),
            Target::RunsDir => ("runs directory".into(), String::new()),
            Target::Set(key) => (format!("--set {key}"), key.clone()),
        }
    }
}

/// What a case must do.
#[derive(Debug, Clone, PartialEq)]
enum Expect {
    /// Rendered, run to the trainer, exit 0, `#SBATCH` lines first, no canary.
    Runs,
    /// Refused before anything is written, the error naming this key.
    Refused(String),
    /// Shell by design (`setup:`): the payload's canary must appear (`fires`), or the job may
    /// fail on what the payload made of the line.
    Shell { fires: bool },
}

/// What orch must do with `payload` in the field `label` (keyed `name`) of an experiment on
/// `template`.
fn expected(label: &str, name: &str, template: &str, payload: &str) -> Expect {
    let refused = |key: &str| Expect::Refused(key.to_string());
    // AReaL's launcher runs its arguments through a second shell: a value that shell would
    // change is refused, naming the trainer key it goes to (render/arguments.rs).
    let areal = template == "areal-grpo";
    if let Some((map, _)) = label.strip_suffix('}').and_then(|l| l.rsplit_once('{')) {
        return match map {
            // Not a variable name: plan::check refuses it.
            m if m.ends_with(".env") => refused(name),
            "experiment.resources" => refused(&format!("resources.{name}")),
            // torchrun's `model.*` is free-form: the key goes into train_config.yaml, written
            // by serde_yaml, which no shell reads.
            "experiment.overrides" if template == "torchrun-yaml" && name.starts_with("model.") => {
                Expect::Runs
            }
            // A key the trainer does not have, or that Hydra's grammar cannot hold.
            m if m.starts_with("experiment.overrides") || m.starts_with("profile.overrides") => {
                refused(name)
            }
            // A variable the template does not read.
            "experiment.vars" => Expect::Runs,
            other => panic!("no expectation for the entry names of {other}"),
        };
    }
    let set_trainer_key = label
        .strip_prefix("--set ")
        .filter(|k| !k.starts_with("env.") && !k.starts_with("resources."));
    match label {
        "profile.setup[0]" | "experiment.setup[0]" => match payload {
            "newline" => refused("setup"),
            "subst" | "backquote" | "semicolon" => Expect::Shell { fires: true },
            _ => Expect::Shell { fires: false },
        },
        // Each goes on an #SBATCH line: what cannot is refused, naming the resource (the render
        // context; resources.time by plan::check).
        l if l.starts_with("profile.slurm.") || l.starts_with("experiment.resources.") => {
            refused(&format!("resources.{name}"))
        }
        "--set resources.partition" => refused("resources.partition"),
        l if l.ends_with("container.runtime") => refused("container.runtime"),
        "experiment.model" | "--set model" if areal => refused("actor.path"),
        "experiment.train_files" if areal => refused("train_dataset.path"),
        "experiment.val_files" if areal => refused("valid_dataset.path"),
        l if areal && l.starts_with("experiment.overrides.") => refused(name),
        _ if areal && set_trainer_key.is_some() => refused(set_trainer_key.unwrap()),
        // The checkpoint directory, in the runs directory, is an AReaL argument.
        "runs directory" if areal => refused("cluster.fileroot"),
        // The templates' rules: a value the trainer does not take.
        "experiment.overrides.training.dtype" => refused("training.dtype"),
        "experiment.overrides.precision" => refused("precision"),
        _ => Expect::Runs,
    }
}

/// The documents one arrangement starts from.
struct Base {
    experiment: String,
    profile: String,
    template: String,
    arrangement: &'static str,
    profile_doc: Value,
    experiment_doc: Value,
}

/// One rendering: an arrangement with one payload in some of its fields (none: the baseline).
struct Case {
    base: Arc<Base>,
    /// The fields given the payload; the canary of the i-th is tagged `f<i>`.
    targets: Vec<Target>,
    payload: Option<&'static str>,
    simulate: bool,
    expect: Expect,
}

impl Case {
    fn label(&self) -> String {
        let base = &self.base;
        let fields = match self.targets.as_slice() {
            [] => "baseline".to_string(),
            [one] => one.label().0,
            many => format!("{} fields", many.len()),
        };
        format!(
            "{fields} + {} of {} on {} ({}{})",
            self.payload.unwrap_or("nothing"),
            base.experiment,
            base.profile,
            base.arrangement,
            if self.simulate { ", simulated" } else { "" }
        )
    }

    /// The field a canary's name points at.
    fn field_of(&self, canary: &str) -> String {
        canary
            .rsplit_once("-f")
            .and_then(|(_, n)| n.parse::<usize>().ok())
            .and_then(|i| self.targets.get(i))
            .map_or_else(|| canary.to_string(), |t| t.label().0)
    }

    /// The profile, the experiment, the runs directory's suffix and the `--set`s of this case.
    fn documents(&self) -> (Value, Value, String, Vec<SetArg>) {
        let mut profile = self.base.profile_doc.clone();
        let mut experiment = self.base.experiment_doc.clone();
        let mut suffix = String::new();
        let mut sets = Vec::new();
        for (i, target) in self.targets.iter().enumerate() {
            let text = payload_text(self.payload.unwrap(), i);
            match target {
                Target::Profile(f) => inject(&mut profile, f, &text),
                Target::Experiment(f) => inject(&mut experiment, f, &text),
                Target::RunsDir => suffix = text,
                Target::Set(key) => sets.push(SetArg::text(key, &format!("x{text}"))),
            }
        }
        (profile, experiment, suffix, sets)
    }
}

/// What one case did.
#[derive(Debug)]
enum Outcome {
    /// orch refused it; the error.
    Refused(String),
    /// Rendered and run: what went wrong (empty: nothing), and the canaries found.
    Ran {
        problems: Vec<String>,
        canaries: Vec<String>,
    },
}

/// Whether `outcome` is what `case` expects; the problem if not.
fn verdict(case: &Case, outcome: &Outcome) -> Result<(), String> {
    match (&case.expect, outcome) {
        (Expect::Runs, Outcome::Ran { problems, canaries }) => {
            if !canaries.is_empty() {
                let fields: Vec<String> = canaries.iter().map(|c| case.field_of(c)).collect();
                Err(format!(
                    "CANARY {canaries:?}: the payload ran, from {fields:?}"
                ))
            } else if !problems.is_empty() {
                Err(problems.join("; "))
            } else {
                Ok(())
            }
        }
        (Expect::Refused(key), Outcome::Refused(e)) if e.contains(key.as_str()) => Ok(()),
        (Expect::Refused(key), Outcome::Refused(e)) => {
            Err(format!("refused, but the error does not name {key}: {e}"))
        }
        (Expect::Shell { fires }, Outcome::Ran { canaries, .. }) => {
            let canary = format!("{}-f0", case.payload.unwrap());
            if *fires && !canaries.contains(&canary) {
                Err(format!(
                    "the setup line did not run: no {canary} (canaries: {canaries:?})"
                ))
            } else {
                Ok(())
            }
        }
        (Expect::Refused(key), Outcome::Ran { problems, canaries }) => Err(format!(
            "rendered (problems {problems:?}, canaries {canaries:?}), but should be refused naming {key}"
        )),
        (_, Outcome::Refused(e)) => Err(format!("refused: {e}")),
    }
}

/// Stand-ins for every program a rendered job may call that is not here: each records its name
/// in `$STUB_LOG`; `srun` and `apptainer` then run the command they wrap, where they were told.
fn stand_ins(dir: &Path) {
    let record = "#!/bin/bash\nprintf '%s\\n' \"${0##*/}\" >> \"$STUB_LOG\"\n";
    for name in [
        "python", "python3", "torchrun", "orch", "ray", "scontrol", "sbatch",
    ] {
        write_exe(&dir.join(name), &format!("{record}exit 0\n"));
    }
    write_exe(
        &dir.join("srun"),
        &format!(
            "{record}while [ $# -gt 0 ]; do\n  case $1 in\n    --container-workdir=*) cd \"${{1#*=}}\" || exit 97; shift ;;\n    -w) shift 2 ;;\n    -*) shift ;;\n    *) break ;;\n  esac\ndone\n[ $# -eq 0 ] && exit 0\nexec \"$@\"\n"
        ),
    );
    write_exe(
        &dir.join("apptainer"),
        &format!(
            "{record}[ \"$1\" = exec ] || exit 98\nshift\nwhile [ $# -gt 0 ]; do\n  case $1 in\n    --nv) shift ;;\n    --bind) shift 2 ;;\n    --pwd) cd \"$2\" || exit 97; shift 2 ;;\n    *) break ;;\n  esac\ndone\nshift\nexec \"$@\"\n"
        ),
    );
}

/// The trainer a launch script runs in the end (its stand-in's name).
fn trainer_program(template: &str, simulate: bool) -> &'static str {
    match (template, simulate) {
        (_, true) => "orch",
        ("verl-grpo" | "areal-grpo", false) => "python3",
        ("rl-swarm", false) => "python",
        ("torchrun-yaml", false) => "torchrun",
        (other, _) => panic!("which program does template {other} run?"),
    }
}

/// Lines of `job.sbatch` that are commands before its last `#SBATCH` line (sbatch stops reading
/// directives at the first command).
fn commands_before_directives(job: &str) -> Vec<String> {
    let lines: Vec<&str> = job.lines().collect();
    let Some(last) = lines.iter().rposition(|l| l.starts_with("#SBATCH")) else {
        return vec!["no #SBATCH line".into()];
    };
    lines[..last]
        .iter()
        .filter(|l| !(l.trim().is_empty() || l.starts_with('#')))
        .map(|l| l.to_string())
        .collect()
}

/// Render and run one case. `catalog` reads `project`, the thread's own project directory, where
/// the case's profile and experiment are written; it keeps the templates it loaded.
fn run_case(
    case: &Case,
    catalog: &Catalog,
    project: &Path,
    stubs: &Path,
    scratch: &Path,
) -> Outcome {
    let (profile_doc, experiment_doc, runs_suffix, sets) = case.documents();
    for (kind, name, doc) in [
        ("profiles", &case.base.profile, &profile_doc),
        ("experiments", &case.base.experiment, &experiment_doc),
    ] {
        let dir = project.join(kind);
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(
            dir.join(format!("{name}.yaml")),
            serde_yaml::to_string(doc).unwrap(),
        )
        .unwrap();
    }
    let refused = |e: &dyn std::fmt::Display| Outcome::Refused(format!("{e:#}"));
    let found = match Experiment::find(catalog, &case.base.experiment) {
        Ok(mut found) => found.remove(0),
        Err(e) => return refused(&e),
    };
    let (setup, plan) = match Setup::load(catalog, found, Some(&case.base.profile), &sets) {
        Ok(loaded) => loaded,
        Err(e) => return refused(&e),
    };
    if let Err(e) = plan.check(&setup) {
        return refused(&e);
    }
    let run_dir = scratch.join(format!("runs{runs_suffix}")).join("RUN");
    let dir = run_dir.join("attempts/1");
    let info = AttemptInfo {
        run_id: "RUN".into(),
        attempt: 1,
        dir: dir.clone(),
        // Simulated, the job is rendered as for another host: `orch` from PATH, the stand-in.
        write_dir: if case.simulate {
            scratch.join("elsewhere")
        } else {
            dir.clone()
        },
        run_dir: run_dir.clone(),
        job_name: "orch-RUN-a1".into(),
        simulate: case.simulate,
        checkpoint_dir: run_dir.join("checkpoints"),
        devices: None,
    };
    let files = match render_to_strings(catalog, &setup, &plan, &info) {
        Ok(files) => files,
        Err(e) => return refused(&e),
    };
    std::fs::create_dir_all(&dir).unwrap();
    let mut problems = Vec::new();
    for (name, text) in &files {
        write_exe(&dir.join(name), text);
    }
    let early = commands_before_directives(&files[0].1);
    if !early.is_empty() {
        problems.push(format!("commands before the #SBATCH lines: {early:?}"));
    }
    let home = scratch.join("home");
    std::fs::create_dir_all(&home).unwrap();
    // The checkouts the launch scripts `cd` into: every `*_dir` variable, as the plan has it.
    for (k, v) in &plan.vars {
        if let (true, Some(path)) = (k.ends_with("_dir"), v.as_str()) {
            let path = path
                .strip_prefix("~/")
                .map_or(PathBuf::from(path), |p| home.join(p));
            std::fs::create_dir_all(path).unwrap();
        }
    }
    let canary = scratch.join("canary");
    std::fs::create_dir_all(&canary).unwrap();
    let log = scratch.join("stub.log");
    let out = Command::new("bash")
        .arg(dir.join(&files[0].0))
        .current_dir(&dir)
        .env_clear()
        .env(
            "PATH",
            format!("{}:/usr/local/bin:/usr/bin:/bin", stubs.display()),
        )
        .env("HOME", &home)
        .env("CANARY_DIR", &canary)
        .env("STUB_LOG", &log)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    if !out.status.success() {
        problems.push(format!("the job exited {:?}: {stderr}", out.status.code()));
    }
    let called = std::fs::read_to_string(&log).unwrap_or_default();
    let trainer = trainer_program(&setup.template.name, case.simulate);
    if !called.lines().any(|l| l == trainer) {
        problems.push(format!(
            "the job never reached {trainer} (called: {called:?}; stderr: {stderr})"
        ));
    }
    let canaries = std::fs::read_dir(&canary)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    Outcome::Ran { problems, canaries }
}

/// The arrangements of one experiment on one profile — no container, the profile's Apptainer
/// one, the experiment's Pyxis one (with a resource of the experiment's own, which replaces the
/// profile's) — and the fields each puts payloads in.
fn arrangements(
    catalog: &Catalog,
    experiment: &str,
    profile: &str,
) -> Vec<(Arc<Base>, Vec<Target>)> {
    let shipped = builtin(catalog, Kind::Experiments, experiment);
    let template = shipped["template"].as_str().unwrap().to_string();
    let experiment_doc = full_experiment(&shipped, catalog);
    let profile_doc = full_profile(&builtin(catalog, Kind::Profiles, profile));
    let base = |arrangement, profile_doc, experiment_doc| {
        Arc::new(Base {
            experiment: experiment.to_string(),
            profile: profile.to_string(),
            template: template.clone(),
            arrangement,
            profile_doc,
            experiment_doc,
        })
    };
    // What a profile holds for other templates is not read here.
    let others: Vec<String> = catalog
        .names(Kind::Templates)
        .into_iter()
        .filter(|t| *t != template)
        .map(|t| format!("overrides.{t}"))
        .collect();
    let mut skip: Vec<&str> = others.iter().map(String::as_str).collect();
    skip.push("container");
    let plain = base("plain", profile_doc.clone(), experiment_doc.clone());
    let mut targets: Vec<Target> = fields(&plain.profile_doc, &["env", "overrides.*"], &skip)
        .into_iter()
        .map(Target::Profile)
        .collect();
    targets.extend(
        fields(
            &plain.experiment_doc,
            &["env", "overrides", "vars", "resources"],
            &["template", "profile", "ladder", "sweep"],
        )
        .into_iter()
        .map(Target::Experiment),
    );
    targets.push(Target::RunsDir);
    let (key, _) = string_override(&template);
    for set in ["model", "env.ORCH_TEST_SET", "resources.partition", key] {
        targets.push(Target::Set(set.to_string()));
    }
    let under = |doc: &Value, named: &[&str], tops: &[&str]| {
        fields(doc, named, &[])
            .into_iter()
            .filter(|f| matches!(&f.path[0], Step::Key(k) if tops.contains(&k.as_str())))
            .collect::<Vec<_>>()
    };
    let mut p = profile_doc.clone();
    set(&mut p, "container", apptainer());
    let with_apptainer = base("apptainer", p, experiment_doc.clone());
    let in_apptainer = under(
        &with_apptainer.profile_doc,
        &["container.env"],
        &["container"],
    )
    .into_iter()
    .map(Target::Profile)
    .collect();
    let mut e = experiment_doc;
    set(&mut e, "container", pyxis());
    add(&mut e, "resources", "partition", "gpu2".into());
    let with_pyxis = base("pyxis", profile_doc, e);
    let in_pyxis = under(
        &with_pyxis.experiment_doc,
        &["container.env", "resources"],
        &["container", "resources"],
    )
    .into_iter()
    .map(Target::Experiment)
    .collect();
    vec![
        (plain, targets),
        (with_apptainer, in_apptainer),
        (with_pyxis, in_pyxis),
    ]
}

#[test]
fn data_in_any_field_never_runs_in_a_job_script() {
    let empty = tempfile::tempdir().unwrap();
    let catalog = Catalog::new(empty.path());
    let stubs = empty.path().join("bin");
    stand_ins(&stubs);

    let mut cases = Vec::new();
    let mut pairs = BTreeSet::new();
    let mut checked: BTreeMap<String, BTreeSet<&str>> = BTreeMap::new();
    for experiment in catalog.names(Kind::Experiments) {
        let own_profile = builtin(&catalog, Kind::Experiments, &experiment)["profile"]
            .as_str()
            .unwrap()
            .to_string();
        for profile in catalog.names(Kind::Profiles) {
            let own = profile == own_profile;
            for (base, targets) in arrangements(&catalog, &experiment, &profile) {
                pairs.insert((base.template.clone(), profile.clone()));
                // The arrangement as it is runs, simulated and not: the job reaches the trainer
                // (the fields with payloads must then reach it too).
                for simulate in [false, true] {
                    cases.push(Case {
                        base: base.clone(),
                        targets: vec![],
                        payload: None,
                        simulate,
                        expect: Expect::Runs,
                    });
                }
                for &(payload, _) in PAYLOADS {
                    let mut runs = Vec::new();
                    for target in &targets {
                        let (label, name) = target.label();
                        let expect = expected(&label, &name, &base.template, payload);
                        checked.entry(label).or_default().insert(payload);
                        match expect {
                            Expect::Runs => runs.push(target.clone()),
                            // Alone, on the experiment's own profile.
                            _ if own => cases.push(Case {
                                base: base.clone(),
                                targets: vec![target.clone()],
                                payload: Some(payload),
                                simulate: false,
                                expect,
                            }),
                            _ => {}
                        }
                    }
                    // Together, simulated too on the experiment's own profile.
                    for simulate in [false, true].into_iter().filter(|s| !s || own) {
                        cases.push(Case {
                            base: base.clone(),
                            targets: runs.clone(),
                            payload: Some(payload),
                            simulate,
                            expect: Expect::Runs,
                        });
                    }
                }
            }
        }
    }
    let mut want = BTreeSet::new();
    for t in catalog.names(Kind::Templates) {
        for p in catalog.names(Kind::Profiles) {
            want.insert((t.clone(), p));
        }
    }
    assert_eq!(pairs, want, "every template is rendered on every profile");

    let outcomes = run_all(&cases, &stubs);
    let mut failures = Vec::new();
    let mut tally: BTreeMap<&str, usize> = BTreeMap::new();
    for (case, outcome) in cases.iter().zip(&outcomes) {
        let kind = match (&case.expect, case.targets.len()) {
            (_, 0) => "baselines run",
            (Expect::Runs, _) => "renderings with payloads run, no canary",
            (Expect::Refused(_), _) => "payloads refused naming the key",
            (Expect::Shell { .. }, _) => "setup lines (shell by design)",
        };
        *tally.entry(kind).or_default() += 1;
        if let Err(why) = verdict(case, outcome) {
            failures.push(format!("{}: {why}", case.label()));
        }
    }
    let pairs_checked: usize = checked.values().map(BTreeSet::len).sum();
    eprintln!(
        "{} fields × {} payloads ({pairs_checked} field × payload pairs) on {} template × profile pairs, in {} renderings: {tally:?}",
        checked.len(),
        PAYLOADS.len(),
        pairs.len(),
        cases.len(),
    );
    assert!(
        failures.is_empty(),
        "{} of {} renderings failed:\n{}",
        failures.len(),
        cases.len(),
        failures.join("\n")
    );
}

/// Run every case on a few threads, each with its own project directory.
fn run_all(cases: &[Case], stubs: &Path) -> Vec<Outcome> {
    // Twice the CPUs: a case spends much of its time waiting for the processes it starts.
    let threads = 2 * std::thread::available_parallelism().map_or(2, |n| n.get());
    let next = std::sync::atomic::AtomicUsize::new(0);
    let results: Vec<std::sync::Mutex<Option<Outcome>>> =
        cases.iter().map(|_| std::sync::Mutex::new(None)).collect();
    std::thread::scope(|s| {
        for _ in 0..threads {
            s.spawn(|| {
                let project = tempfile::tempdir().unwrap();
                let catalog = Catalog::new(project.path());
                loop {
                    let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    let Some(case) = cases.get(i) else { break };
                    let scratch = tempfile::tempdir().unwrap();
                    let outcome = run_case(case, &catalog, project.path(), stubs, scratch.path());
                    *results[i].lock().unwrap() = Some(outcome);
                }
            });
        }
    });
    results
        .into_iter()
        .map(|r| r.into_inner().unwrap().expect("every case ran"))
        .collect()
}

/// The runs directory as orch itself makes and runs it: `orch submit --backend local` with a
/// runs directory whose name holds every payload (a newline, `$(…)`, backquotes, `;`, quotes)
/// runs the job to its end and no payload runs; a `setup:` line of the experiment, which is
/// shell, does run (so the job's shell sees `CANARY_DIR`).
#[test]
fn a_runs_directory_named_like_a_command_is_only_a_name() {
    let canary = tempfile::tempdir().unwrap();
    let orch = Orch::new()
        .env("CANARY_DIR", &canary.path().display().to_string())
        .file(
            "experiments/named.yaml",
            "template: rl-swarm\nprofile: rtx4090\nmodel: Gensyn/Qwen2.5-0.5B-Instruct\nresources: {gpus: 1}\noverrides:\n  training.dtype: float16\nsetup:\n  - touch \"$CANARY_DIR/setup-ran\"\n",
        );
    let name: String = PAYLOADS
        .iter()
        .map(|(payload, _)| payload_text(payload, 0))
        .collect();
    let runs = orch.path().join(format!("runs{name}"));
    let run = orch.submit_simulated(
        &[
            "named",
            "--runs-dir",
            runs.to_str().unwrap(),
            "--max-attempts",
            "1",
            "--json",
        ],
        0,
    );
    assert_eq!(run.json()["state"], "succeeded", "{run:?}");
    let mut found: Vec<String> = std::fs::read_dir(canary.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    found.sort();
    assert_eq!(found, ["setup-ran"], "only the setup line runs: {run:?}");
    let job = walk_find(&runs, "job.sbatch").expect("the job script is in the runs directory");
    let text = std::fs::read_to_string(&job).unwrap();
    assert_eq!(
        commands_before_directives(&text),
        Vec::<String>::new(),
        "{text}"
    );
}

/// The first file named `name` under `dir`.
fn walk_find(dir: &Path, name: &str) -> Option<PathBuf> {
    for entry in std::fs::read_dir(dir).ok()?.flatten() {
        let path = entry.path();
        if path.is_dir() {
            if let Some(found) = walk_find(&path, name) {
                return Some(found);
            }
        } else if entry.file_name() == name {
            return Some(path);
        }
    }
    None
}
