//! Rendering: a plan and a template directory become the files of one attempt.
//!
//! One minijinja [`environment`] with strict undefined (a misspelt variable is an error, not an
//! empty string) and two filters: `shq` quotes any value for a POSIX shell, so a value like
//! `x$(touch /tmp/p)` reaches the trainer as that literal string; `directive` refuses values that
//! could break out of an `#SBATCH` line. Errors name the template file and line.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use minijinja::{Environment, ErrorKind, UndefinedBehavior, Value};
use serde::Serialize;

use crate::config::Catalog;
use crate::config::template::Template;
use crate::plan::{Plan, Setup, trainer_value};

/// A template that could not be rendered.
#[derive(Debug, thiserror::Error)]
#[error("template {name}{}: {message}", line.map(|l| format!(" line {l}")).unwrap_or_default())]
pub struct RenderError {
    pub name: String,
    pub line: Option<usize>,
    pub message: String,
}

impl RenderError {
    fn from_minijinja(name: &str, err: &minijinja::Error) -> Self {
        let mut message = err
            .detail()
            .map(str::to_string)
            .unwrap_or_else(|| err.kind().to_string());
        if let Some(source) = std::error::Error::source(err) {
            message.push_str(&format!(": {source}"));
        }
        RenderError {
            name: err.name().unwrap_or(name).to_string(),
            line: err.line(),
            message,
        }
    }
}

/// The environment every template and rule is evaluated in.
pub fn environment() -> Environment<'static> {
    let mut env = Environment::new();
    env.set_undefined_behavior(UndefinedBehavior::Strict);
    env.set_syntax(
        minijinja::syntax::SyntaxConfig::builder()
            .keep_trailing_newline(true)
            .build()
            .expect("default delimiters are valid"),
    );
    env.add_filter("shq", shq);
    env.add_filter("directive", directive);
    env
}

fn text_of(value: &Value) -> Result<String, minijinja::Error> {
    if value.is_undefined() {
        return Err(minijinja::Error::new(
            ErrorKind::UndefinedError,
            "undefined value",
        ));
    }
    Ok(match value.as_str() {
        Some(s) => s.to_string(),
        None => value.to_string(),
    })
}

/// Quote a value for a POSIX shell (safe values are left as they are).
pub fn shq(value: Value) -> Result<String, minijinja::Error> {
    let text = text_of(&value)?;
    shlex::try_quote(&text)
        .map(|q| q.into_owned())
        .map_err(|e| {
            minijinja::Error::new(
                ErrorKind::InvalidOperation,
                format!("cannot quote {text:?}: {e}"),
            )
        })
}

/// Allow only characters that cannot end or extend an `#SBATCH` directive.
pub fn directive(value: Value) -> Result<String, minijinja::Error> {
    let text = text_of(&value)?;
    let ok = !text.is_empty()
        && text
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"._:,=/@%+-[]".contains(&b));
    if ok {
        Ok(text)
    } else {
        Err(minijinja::Error::new(
            ErrorKind::InvalidOperation,
            format!(
                "{text:?} cannot go on an #SBATCH line (letters, digits and ._:,=/@%+-[] only)"
            ),
        ))
    }
}

/// Any serializable value as a template value.
pub fn to_value<T: Serialize>(value: T) -> Value {
    Value::from(minijinja::value::Serde(value))
}

/// What the attempt being rendered is, beyond its plan.
#[derive(Debug, Clone, Serialize)]
pub struct AttemptInfo {
    pub run_id: String,
    pub attempt: u32,
    /// The attempt directory as the job sees it (absolute; on a remote host, its path there).
    pub dir: PathBuf,
    /// Where the rendered files are written here (absolute).
    pub write_dir: PathBuf,
    /// The run's directory (absolute).
    pub run_dir: PathBuf,
    /// The scheduler job name (`orch-<run>-a<N>`).
    pub job_name: String,
    /// Run the simulated trainer instead of the real one.
    pub simulate: bool,
    /// Where checkpoints go, shared by all attempts of the run.
    pub checkpoint_dir: PathBuf,
}

#[derive(Serialize)]
struct Override {
    key: String,
    value: String,
}

#[derive(Serialize)]
struct Context<'a> {
    experiment: BTreeMap<&'static str, minijinja::Value>,
    profile: BTreeMap<&'static str, minijinja::Value>,
    resources: &'a crate::config::profile::Resources,
    overrides: Vec<Override>,
    /// Trainer keys (defaults and overrides) as nested values: `config.data.train_batch_size`.
    config: serde_json::Value,
    config_yaml: String,
    env: BTreeMap<String, String>,
    sim_env: BTreeMap<String, String>,
    simulate: bool,
    orch_bin: String,
    resume: bool,
    checkpoint_dir: String,
    run: BTreeMap<&'static str, minijinja::Value>,
}

/// Render every file of the plan's template into `info.dir`; returns the paths written, the job
/// script first. Nothing is written unless every template renders.
pub fn render(
    catalog: &Catalog,
    setup: &Setup,
    plan: &Plan,
    info: &AttemptInfo,
) -> anyhow::Result<Vec<PathBuf>> {
    let outputs = render_to_strings(catalog, setup, plan, info)?;
    std::fs::create_dir_all(&info.write_dir)?;
    let mut paths = Vec::new();
    for (name, text) in outputs {
        let path = info.write_dir.join(&name);
        crate::ledger::write_atomic(&path, text.as_bytes())?;
        if name.ends_with(".sh") || name.ends_with(".sbatch") {
            set_executable(&path)?;
        }
        paths.push(path);
    }
    Ok(paths)
}

fn set_executable(path: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755))
}

/// Render every file of the template to (output name, text), in order.
pub fn render_to_strings(
    catalog: &Catalog,
    setup: &Setup,
    plan: &Plan,
    info: &AttemptInfo,
) -> Result<Vec<(String, String)>, RenderError> {
    let template: &Template = &setup.template;
    let mut env = environment();
    let mut names = Vec::new();
    for file in &template.spec.files {
        let doc =
            Template::file(catalog, &template.name, &file.source).map_err(|e| RenderError {
                name: format!("templates/{}/{}", template.name, file.source),
                line: None,
                message: e.to_string(),
            })?;
        let name = match &doc.origin {
            crate::config::Origin::Builtin(rel) => rel.clone(),
            crate::config::Origin::File(p) => p.display().to_string(),
        };
        env.add_template_owned(name.clone(), doc.text)
            .map_err(|e| RenderError::from_minijinja(&name, &e))?;
        names.push((name, file.output.clone()));
    }
    let ctx = context(setup, plan, info);
    let mut out = Vec::new();
    for (name, output) in names {
        let tmpl = env
            .get_template(&name)
            .map_err(|e| RenderError::from_minijinja(&name, &e))?;
        let text = tmpl
            .render(to_value(&ctx))
            .map_err(|e| RenderError::from_minijinja(&name, &e))?;
        out.push((output, text));
    }
    Ok(out)
}

fn context<'a>(setup: &'a Setup, plan: &'a Plan, info: &AttemptInfo) -> Context<'a> {
    let mut overrides = plan.effective_overrides(setup);
    if let Some(key) = &setup.template.spec.checkpoint_key
        && !plan.overrides.contains_key(key)
    {
        overrides.insert(
            key.clone(),
            info.checkpoint_dir.display().to_string().into(),
        );
    }
    let mut tree = serde_yaml::Mapping::new();
    for (k, v) in &overrides {
        insert_yaml(&mut tree, k.trim_start_matches('+'), v.clone());
    }
    let config_yaml = serde_yaml::to_string(&tree).unwrap_or_default();
    let file = &setup.experiment.file;
    let experiment = BTreeMap::from([
        ("name", Value::from(setup.experiment.name.clone())),
        ("file", Value::from(setup.experiment.file_name.clone())),
        ("description", Value::from(file.description.clone())),
        ("model", to_value(&file.model)),
        ("train_files", to_value(&file.train_files)),
        ("val_files", to_value(&file.val_files)),
        ("seed", to_value(file.seed)),
        ("vars", to_value(&plan.vars)),
    ]);
    let profile = BTreeMap::from([
        ("name", Value::from(plan.profile.clone())),
        (
            "description",
            Value::from(setup.profile.description.clone()),
        ),
        ("gpu", to_value(&setup.profile.gpu)),
        ("host", to_value(&setup.profile.host)),
    ]);
    let sim_env = BTreeMap::from([
        (
            "ORCH_SIM_GPU_NAME".to_string(),
            setup.profile.gpu.model.clone(),
        ),
        (
            "ORCH_SIM_GPU_MEM_GIB".to_string(),
            setup.profile.gpu.memory_gib.to_string(),
        ),
        ("ORCH_SIM_GPUS".to_string(), plan.resources.gpus.to_string()),
        (
            "ORCH_SIM_HOST_MEM_GIB".to_string(),
            plan.resources.mem_gb.to_string(),
        ),
    ]);
    let run = BTreeMap::from([
        ("id", Value::from(info.run_id.clone())),
        ("attempt", Value::from(info.attempt)),
        ("dir", Value::from(info.dir.display().to_string())),
        ("run_dir", Value::from(info.run_dir.display().to_string())),
        ("job_name", Value::from(info.job_name.clone())),
        ("step_name", Value::from(plan.step_name().to_string())),
        ("steps", to_value(&plan.steps)),
    ]);
    Context {
        experiment,
        profile,
        resources: &plan.resources,
        overrides: overrides
            .iter()
            .map(|(k, v)| Override {
                key: k.clone(),
                value: trainer_value(v),
            })
            .collect(),
        config: plan.config_tree(setup),
        config_yaml,
        env: plan
            .env
            .iter()
            .map(|(k, s)| (k.clone(), crate::config::experiment::scalar_text(&s.value)))
            .collect(),
        sim_env,
        simulate: info.simulate,
        // On a remote host the simulator is whatever `orch` ORCH_REMOTE_ORCH names (or PATH has).
        orch_bin: match std::env::var("ORCH_REMOTE_ORCH") {
            Ok(bin) if info.dir != info.write_dir => bin,
            _ if info.dir != info.write_dir => "orch".into(),
            _ => std::env::current_exe()
                .map(|p| p.display().to_string())
                .unwrap_or_else(|_| "orch".into()),
        },
        resume: plan.resume,
        checkpoint_dir: info.checkpoint_dir.display().to_string(),
        run,
    }
}

fn insert_yaml(map: &mut serde_yaml::Mapping, key: &str, value: serde_yaml::Value) {
    match key.split_once('.') {
        None => {
            map.insert(key.into(), value);
        }
        Some((head, rest)) => {
            let entry = map
                .entry(head.into())
                .or_insert_with(|| serde_yaml::Value::Mapping(Default::default()));
            if !entry.is_mapping() {
                *entry = serde_yaml::Value::Mapping(Default::default());
            }
            if let serde_yaml::Value::Mapping(inner) = entry {
                insert_yaml(inner, rest, value);
            }
        }
    }
}
