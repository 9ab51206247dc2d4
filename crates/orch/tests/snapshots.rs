//! Snapshots of every template rendered on every hardware profile, one test per pair so that a
//! failure names it (`INSTA_UPDATE=always cargo test` to accept a deliberate change, then
//! review the diff in tests/snapshots/).

use std::path::PathBuf;

use orch_core::config::experiment::Experiment;
use orch_core::config::{Catalog, Kind};
use orch_core::plan::Setup;
use orch_core::render::{AttemptInfo, render_to_strings};

fn builtin_catalog() -> (tempfile::TempDir, Catalog) {
    let empty = tempfile::tempdir().unwrap();
    let catalog = Catalog::new(empty.path());
    (empty, catalog)
}

/// Render `experiment` (of `template`) on `profile` and compare with its snapshot,
/// `<template>__<profile>.snap`.
fn render_snapshot(template: &str, experiment: &str, profile: &str) {
    let (_guard, catalog) = builtin_catalog();
    let found = Experiment::find(&catalog, experiment).unwrap().remove(0);
    let (setup, plan) = Setup::load(&catalog, found, Some(profile), &[]).unwrap();
    assert_eq!(setup.template.name, template, "{experiment}'s template");
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
        devices: None,
    };
    let files = render_to_strings(&catalog, &setup, &plan, &info).unwrap();
    // The project directory is a fresh temporary one.
    let project = std::path::absolute(catalog.project_dir())
        .unwrap()
        .display()
        .to_string();
    let mut text = String::new();
    for (name, body) in files {
        let body = body.replace(&project, "/project");
        text.push_str(&format!("==> {name} <==\n{body}\n"));
    }
    insta::assert_snapshot!(format!("{template}__{profile}"), text);
}

/// One `#[test]` per template (with the experiment that shows it) and profile, and the list
/// of the pairs they cover.
macro_rules! render_tests {
    ($($template:literal with $experiment:literal: {$($test:ident on $profile:literal,)*})*) => {
        $($(
            #[test]
            fn $test() {
                render_snapshot($template, $experiment, $profile);
            }
        )*)*

        const COVERED: &[(&str, &str)] = &[$($(($template, $profile),)*)*];
    };
}

render_tests! {
    "verl-grpo" with "diamonds-seed0": {
        verl_grpo_on_a40 on "a40",
        verl_grpo_on_a100_40g on "a100-40g",
        verl_grpo_on_a100_80g on "a100-80g",
        verl_grpo_on_h100_80g on "h100-80g",
        verl_grpo_on_h200 on "h200",
        verl_grpo_on_l40s on "l40s",
        verl_grpo_on_rtx4090 on "rtx4090",
    }
    "areal-grpo" with "gsm8k-areal": {
        areal_grpo_on_a40 on "a40",
        areal_grpo_on_a100_40g on "a100-40g",
        areal_grpo_on_a100_80g on "a100-80g",
        areal_grpo_on_h100_80g on "h100-80g",
        areal_grpo_on_h200 on "h200",
        areal_grpo_on_l40s on "l40s",
        areal_grpo_on_rtx4090 on "rtx4090",
    }
    "torchrun-yaml" with "pretrain-512m": {
        torchrun_yaml_on_a40 on "a40",
        torchrun_yaml_on_a100_40g on "a100-40g",
        torchrun_yaml_on_a100_80g on "a100-80g",
        torchrun_yaml_on_h100_80g on "h100-80g",
        torchrun_yaml_on_h200 on "h200",
        torchrun_yaml_on_l40s on "l40s",
        torchrun_yaml_on_rtx4090 on "rtx4090",
    }
    "rl-swarm" with "rl-swarm-qwen": {
        rl_swarm_on_a40 on "a40",
        rl_swarm_on_a100_40g on "a100-40g",
        rl_swarm_on_a100_80g on "a100-80g",
        rl_swarm_on_h100_80g on "h100-80g",
        rl_swarm_on_h200 on "h200",
        rl_swarm_on_l40s on "l40s",
        rl_swarm_on_rtx4090 on "rtx4090",
    }
}

#[test]
fn every_template_on_every_profile_has_a_snapshot_test() {
    let (_guard, catalog) = builtin_catalog();
    let mut want = Vec::new();
    for template in catalog.names(Kind::Templates) {
        for profile in catalog.names(Kind::Profiles) {
            want.push((template.clone(), profile));
        }
    }
    let mut have: Vec<(String, String)> = COVERED
        .iter()
        .map(|(t, p)| (t.to_string(), p.to_string()))
        .collect();
    want.sort();
    have.sort();
    assert_eq!(
        have, want,
        "render_tests! must list every template × profile"
    );
}
