//! What a trainer must provide, checked for every template directory: adding a trainer is its
//! template directory, its ladder, an experiment, and one module per crate that needs one,
//! registered in that crate's table (`orch_memory::estimate::trainers`,
//! `orch-sim/src/trainers/mod.rs`). The test lists everything missing at once.

use std::path::{Path, PathBuf};

use orch_memory::estimate::Trainer;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn yaml(path: &Path) -> Option<serde_yaml::Value> {
    serde_yaml::from_str(&std::fs::read_to_string(path).ok()?).ok()
}

fn text<'a>(doc: &'a serde_yaml::Value, key: &str) -> Option<&'a str> {
    doc.get(key).and_then(serde_yaml::Value::as_str)
}

/// The experiments under `experiments/` on `template`, with the ladder each names.
fn experiments_on(template: &str) -> Vec<(String, Option<String>)> {
    let Ok(dir) = std::fs::read_dir(root().join("experiments")) else {
        return Vec::new();
    };
    let mut found: Vec<(String, Option<String>)> = dir
        .flatten()
        .filter_map(|e| {
            let doc = yaml(&e.path())?;
            (text(&doc, "template")? == template).then(|| {
                (
                    e.file_name().to_string_lossy().into_owned(),
                    text(&doc, "ladder").map(str::to_string),
                )
            })
        })
        .collect();
    found.sort();
    found
}

/// What `template` lacks of what a trainer must provide.
fn missing(template: &str) -> Vec<String> {
    let dir = root().join("templates").join(template);
    let mut missing = Vec::new();
    let Some(spec) = yaml(&dir.join("template.yaml")) else {
        return vec![
            "templates/{template}/template.yaml (readable YAML)".replace("{template}", template),
        ];
    };
    let keys = text(&spec, "keys").unwrap_or("keys.yaml");
    if !dir.join(keys).is_file() {
        missing.push(format!("templates/{template}/{keys} (the trainer's keys)"));
    }
    match text(&spec, "trainer") {
        None => missing.push("`trainer:` in template.yaml".into()),
        Some(named) => {
            let name: &str = Trainer::parse(named).map_or(named, |t| t.name());
            if Trainer::parse(named).is_none() {
                missing.push(format!(
                    "an estimator for trainer `{name}` (orch-memory: a module under estimate/trainers/ and its row in trainers/mod.rs)"
                ));
            }
            #[cfg(feature = "sim")]
            if !orch_sim::simulated_trainers().contains(&name) {
                missing.push(format!(
                    "a simulator for trainer `{name}` (orch-sim: a module under src/trainers/ and its row in trainers/mod.rs)"
                ));
            }
            let calls_it = format!("sim-train {name}");
            let launches = std::fs::read_dir(&dir)
                .into_iter()
                .flatten()
                .flatten()
                .any(|f| std::fs::read_to_string(f.path()).is_ok_and(|s| s.contains(&calls_it)));
            if !launches {
                missing.push(format!(
                    "a launch script that runs `orch {calls_it}` when simulated"
                ));
            }
        }
    }
    let experiments = experiments_on(template);
    if experiments.is_empty() {
        missing.push(format!(
            "an experiment in experiments/ with `template: {template}`"
        ));
    }
    let ladders: Vec<String> = experiments
        .iter()
        .map(|(_, ladder)| ladder.clone().unwrap_or_else(|| template.to_string()))
        .collect();
    let has_ladder = ladders
        .iter()
        .chain(std::iter::once(&template.to_string()))
        .any(|l| root().join("ladders").join(format!("{l}.yaml")).is_file());
    if !has_ladder {
        missing.push(format!(
            "a ladder in ladders/ ({})",
            ladders
                .first()
                .map_or_else(|| format!("{template}.yaml"), |l| format!("{l}.yaml"))
        ));
    }
    missing
}

#[test]
fn every_template_provides_what_its_trainer_needs() {
    let mut templates: Vec<String> = std::fs::read_dir(root().join("templates"))
        .expect("templates/")
        .flatten()
        .filter(|e| e.path().is_dir())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|name| name != "shared")
        .collect();
    templates.sort();
    assert!(!templates.is_empty());
    let report: Vec<String> = templates
        .iter()
        .flat_map(|t| {
            missing(t)
                .into_iter()
                .map(move |m| format!("templates/{t}: {m}"))
        })
        .collect();
    assert!(
        report.is_empty(),
        "a trainer must provide these, and some are missing:\n  {}",
        report.join("\n  ")
    );
}

#[test]
fn every_registered_trainer_is_simulated() {
    #[cfg(feature = "sim")]
    for t in Trainer::ALL {
        assert!(
            orch_sim::simulated_trainers().contains(&t.name()),
            "trainer `{}` has an estimator but no simulator (orch-sim's src/trainers/mod.rs)",
            t.name()
        );
    }
}
