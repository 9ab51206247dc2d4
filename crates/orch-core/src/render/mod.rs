//! Rendering: a plan and a template directory become the files of one attempt.
//!
//! Each file the template names is loaded (project copy first, then the built-in one) into the
//! template-language environment (whose loader also finds files shared by templates, such as
//! `shared/job.sbatch.j2`, the job script every built-in template includes) ([`crate::config::jinja`]: strict undefined, `shq`,
//! `directive`), then all are rendered against one [`context`](context.rs) built from the
//! setup, the plan and the [`AttemptInfo`]. Every value a template writes goes through one
//! writer, [`script`](script.rs): a filter that says where it goes (`shq`, `home_path`,
//! `directive`, `comment`), a value the context prepared, or text that is inert anywhere in a
//! script; anything else is an error. Nothing is written unless every file renders, and every
//! error names the template file and line.

mod arguments;
mod context;
mod script;

use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::config::Catalog;
use crate::config::template::Template;
use crate::plan::{Plan, Setup};

// The template language and its error lived here before they got modules of their own.
pub use crate::config::jinja::{directive, environment, shq, to_value};
pub use crate::error::RenderError;
pub use arguments::{ArgumentError, OverrideSyntax, argument};

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
    /// The GPU indices orch gave the job on its machine (`CUDA_VISIBLE_DEVICES`), when it
    /// shares that machine's GPUs among its jobs.
    pub devices: Option<Vec<u32>>,
}

/// Render every file of the plan's template into `info.write_dir`; returns the paths written,
/// the job script first. Nothing is written unless every template renders.
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
        crate::atomic::write_atomic(&path, text.as_bytes())?;
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
    script::install(&mut env);
    // `{% include "shared/job.sbatch.j2" %}` and the like: files under templates/ shared by
    // several templates, the project's copy first.
    let shared = catalog.clone();
    env.set_loader(move |name| {
        shared
            .read(crate::config::Kind::Templates, name)
            .map(|doc| doc.map(|d| d.text))
            .map_err(|e| {
                minijinja::Error::new(minijinja::ErrorKind::InvalidOperation, e.to_string())
            })
    });
    let mut names = Vec::new();
    for file in &template.spec.files {
        let doc =
            Template::file(catalog, &template.name, &file.source).map_err(|e| RenderError {
                name: format!("templates/{}/{}", template.name, file.source),
                line: None,
                message: e.to_string(),
            })?;
        // Named by where it came from, so an error points at the file to fix.
        let name = match &doc.origin {
            crate::config::Origin::Builtin(rel) => rel.clone(),
            crate::config::Origin::File(p) => p.display().to_string(),
        };
        env.add_template_owned(name.clone(), doc.text)
            .map_err(|e| render_error(&name, &e))?;
        names.push((name, file.output.clone()));
    }
    let ctx = to_value(
        context::Context::new(setup, plan, info, catalog.project_dir()).map_err(|e| {
            RenderError {
                name: format!("templates/{}", template.name),
                line: None,
                message: e.to_string(),
            }
        })?,
    );
    let mut out = Vec::new();
    for (name, output) in names {
        let text = env
            .get_template(&name)
            .and_then(|tmpl| tmpl.render(&ctx))
            .map_err(|e| render_error(&name, &e))?;
        out.push((output, text));
    }
    Ok(out)
}

/// minijinja's error as ours: the innermost template's name and line (an error in an included
/// file such as `shared/job.sbatch.j2` names that file), and its detail with the underlying
/// cause (a filter's refusal) appended.
fn render_error(name: &str, err: &minijinja::Error) -> RenderError {
    let mut inner = err;
    while let Some(next) = std::error::Error::source(inner)
        .and_then(|s| s.downcast_ref::<minijinja::Error>())
        .filter(|e| e.name().is_some())
    {
        inner = next;
    }
    let mut message = inner
        .detail()
        .map(str::to_string)
        .unwrap_or_else(|| inner.kind().to_string());
    if let Some(source) = std::error::Error::source(inner) {
        message.push_str(&format!(": {source}"));
    }
    let name = match inner.name() {
        // An included file is named as the loader was asked for it: say where it lives.
        Some(n) if !n.starts_with("templates/") && !n.starts_with('/') && !n.starts_with('.') => {
            format!("templates/{n}")
        }
        Some(n) => n.to_string(),
        None => name.to_string(),
    };
    RenderError {
        name,
        line: inner.line(),
        message,
    }
}
