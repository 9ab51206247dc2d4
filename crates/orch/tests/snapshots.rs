//! Snapshots of every template rendered on every hardware profile (`INSTA_UPDATE=always
//! cargo test` to accept a deliberate change, then review the diff in tests/snapshots/).

use std::path::PathBuf;

use orch_core::config::experiment::Experiment;
use orch_core::config::{Catalog, Kind};
use orch_core::plan::Setup;
use orch_core::render::{AttemptInfo, render_to_strings};

/// One experiment per template.
const EXPERIMENTS: &[(&str, &str)] = &[
    ("verl-grpo", "diamonds-seed0"),
    ("areal-grpo", "gsm8k-areal"),
    ("torchrun-yaml", "pretrain-512m"),
];

fn builtin_catalog() -> (tempfile::TempDir, Catalog) {
    let empty = tempfile::tempdir().unwrap();
    let catalog = Catalog::new(empty.path());
    (empty, catalog)
}

#[test]
fn every_template_on_every_profile() {
    let (_guard, catalog) = builtin_catalog();
    let profiles = catalog.names(Kind::Profiles);
    assert!(profiles.len() >= 7, "{profiles:?}");
    let templates = catalog.names(Kind::Templates);
    assert_eq!(
        templates.len(),
        EXPERIMENTS.len(),
        "a template without a snapshot: {templates:?}"
    );
    for (template, experiment) in EXPERIMENTS {
        assert!(templates.iter().any(|t| t == template));
        for profile in &profiles {
            let found = Experiment::find(&catalog, experiment).unwrap().remove(0);
            let (setup, plan) = Setup::load(&catalog, found, Some(profile), &[]).unwrap();
            plan.check(&setup)
                .unwrap_or_else(|e| panic!("{experiment} on {profile}: {e}"));
            let info = AttemptInfo {
                run_id: "RUN".into(),
                attempt: 1,
                dir: PathBuf::from("/runs/RUN/attempts/1"),
                write_dir: PathBuf::from("/runs/RUN/attempts/1"),
                run_dir: PathBuf::from("/runs/RUN"),
                job_name: "orch-RUN-a1".into(),
                simulate: false,
                checkpoint_dir: PathBuf::from("/runs/RUN/checkpoints"),
            };
            let files = render_to_strings(&catalog, &setup, &plan, &info).unwrap();
            let mut text = String::new();
            for (name, body) in files {
                text.push_str(&format!("==> {name} <==\n{body}\n"));
            }
            insta::assert_snapshot!(format!("{template}__{profile}"), text);
        }
    }
}
