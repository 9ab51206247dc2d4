//! `orch report`: one self-contained HTML page on one or more runs, made from their ledger
//! records alone (nothing is re-run or re-read from the logs).
//!
//! `view` works out what the page says from the records, `chart` the geometry of its inline
//! SVG charts, `facts` what both read off a record (times, durations, an outcome's kind),
//! `memory` reads the predicted and measured peaks a record may carry. The page is
//! rendered by minijinja from the templates in `crates/orch/templates/report/`, compiled in:
//! HTML with its stylesheet inline and every chart as SVG, so it opens offline, reads without
//! JavaScript (it has none) and prints. A Content-Security-Policy in the page forbids loading
//! anything from elsewhere, so a later edit that adds a remote font or script fails loudly in
//! the browser test instead of leaking requests.

mod chart;
mod facts;
mod memory;
mod view;

use std::time::SystemTime;

use minijinja::{AutoEscape, Environment, UndefinedBehavior};
use orch_core::ledger::RunRecord;

/// The templates, by the names they include each other by.
const TEMPLATES: &[(&str, &str)] = &[
    (
        "page.html.j2",
        include_str!("../../templates/report/page.html.j2"),
    ),
    (
        "report.css",
        include_str!("../../templates/report/report.css"),
    ),
    (
        "timeline.svg.j2",
        include_str!("../../templates/report/timeline.svg.j2"),
    ),
    (
        "memory.svg.j2",
        include_str!("../../templates/report/memory.svg.j2"),
    ),
];

/// The page for `records` (in the order given), read from `runs_dir`, as of `now`.
pub fn render(records: &[RunRecord], runs_dir: &str, now: SystemTime) -> anyhow::Result<String> {
    let mut env = Environment::new();
    env.set_undefined_behavior(UndefinedBehavior::Strict);
    // Every value is escaped for HTML, in the SVG too: run names and log lines are text.
    env.set_auto_escape_callback(|_| AutoEscape::Html);
    env.add_filter("px", |v: f64| format!("{v:.1}"));
    for (name, source) in TEMPLATES {
        env.add_template(name, source)?;
    }
    let page = view::page(records, runs_dir, now);
    let html = env
        .get_template("page.html.j2")?
        .render(minijinja::context! { page => minijinja::value::Serde(&page) })?;
    Ok(html)
}
