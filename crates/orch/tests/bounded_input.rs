//! Bounded input (issue 41, F6): a file within the size limit whose aliases would expand it
//! to gigabytes, a run's `plan.yaml` doing the same under `resume`, a project dataset that is
//! a link to `/dev/zero` or a FIFO, and `--set model.config=/dev/zero` are each refused with
//! the file and the limit named, and nothing is submitted; every file the repository ships
//! still loads from a project directory.

use std::path::Path;
use std::process::{Command, Output};

use crate::support::{Orch, Run, repo_root};

/// 4 GB of address space, as the reproduction had: an unbounded expansion aborts
/// the process instead of exhausting the machine running the tests.
const ADDRESS_SPACE_KIB: u64 = 4 << 20;

/// `orch ARGS…` as [`Orch::run`] runs it, under [`ADDRESS_SPACE_KIB`] (few malloc arenas and
/// worker threads, so that a many-core machine's reservations stay far below it).
fn capped(orch: &Orch, args: &[&str]) -> Run {
    let inner = orch.command(args);
    let mut cmd = Command::new("sh");
    cmd.arg("-c")
        // A read that blocks (a FIFO) ends in 2 minutes as a failure, not a hung test.
        .arg(format!(
            "ulimit -v {ADDRESS_SPACE_KIB} && exec timeout 120 \"$@\""
        ))
        .arg("sh")
        .arg(inner.get_program())
        .args(inner.get_args())
        .current_dir(inner.get_current_dir().expect("orch runs in its project"))
        .env("MALLOC_ARENA_MAX", "2")
        .env("TOKIO_WORKER_THREADS", "2")
        .stdin(std::process::Stdio::null());
    for (key, value) in inner.get_envs() {
        match value {
            Some(v) => cmd.env(key, v),
            None => cmd.env_remove(key),
        };
    }
    let Output {
        status,
        stdout,
        stderr,
    } = cmd.output().expect("orch runs");
    Run {
        code: status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&stdout).into_owned(),
        stderr: String::from_utf8_lossy(&stderr).into_owned(),
    }
}

/// The demo's run, its orch killed at crash point `point`: its id.
fn demo_run_stopped_at(orch: &Orch, point: &str) -> String {
    crate::support::crash_at(
        orch,
        &[
            "submit",
            "--backend",
            "local",
            "--simulate",
            "diamonds-seed0",
        ],
        point,
    );
    let status = orch.expect(&["status", "--json"], 0).json();
    status[0]["run"].as_str().expect("a run").to_string()
}

/// The fan-out as YAML mapping entries (two-space indented): one 600 KB anchored
/// string named 28,599 times, 16 GiB once expanded, in about 770 KB.
fn fan_out() -> String {
    format!(
        "  big: &big \"{}\"\n  fan: [{}]\n",
        "x".repeat(600_000),
        vec!["*big"; 28_599].join(", ")
    )
}

/// The end of a long message (the refused `--set` value is repeated in it).
fn tail(text: &str) -> &str {
    let start = text.char_indices().rev().nth(2000).map_or(0, |(i, _)| i);
    &text[start..]
}

/// No run was recorded in the project.
fn nothing_submitted(orch: &Orch) {
    let status = orch.expect(&["status", "--json"], 0).json();
    assert_eq!(status, serde_json::json!([]), "{status}");
}

#[test]
fn an_experiment_within_the_size_limit_whose_aliases_expand_past_the_budget_is_refused() {
    let text = format!(
        "description: fan-out\ntemplate: verl-grpo\nvars:\n{}",
        fan_out()
    );
    assert!(text.len() < 1 << 20, "{} bytes", text.len());
    let orch = Orch::new().file("experiments/fanout.yaml", &text);
    for args in [
        &["render", "fanout"][..],
        &["submit", "--backend", "local", "--simulate", "fanout"],
    ] {
        let run = capped(&orch, args);
        assert_eq!(run.code, 2, "orch {args:?}: {run:?}");
        assert!(
            run.stderr
                .contains("experiments/fanout.yaml: its aliases expand it past")
                && run.stderr.contains("MAX_YAML_EXPANDED_BYTES"),
            "{run:?}"
        );
    }
    nothing_submitted(&orch);
    // `orch experiments` lists it as not parsing, and goes on.
    let listed = capped(&orch, &["experiments"]);
    assert!(listed.stdout.contains("diamonds-seed0"), "{listed:?}");
}

#[test]
fn a_set_value_whose_aliases_expand_past_the_budget_is_refused() {
    // The most one argument may be on Linux is 128 KiB: 40 KB named 20,000 times is 800 MB.
    let value = format!(
        "[&a \"{}\", {}]",
        "y".repeat(40_000),
        vec!["*a"; 20_000].join(",")
    );
    let orch = Orch::new();
    let set = format!("vars.v={value}");
    let run = capped(&orch, &["render", "diamonds-seed0", "--set", &set]);
    assert_eq!(run.code, 2, "{}", tail(&run.stderr));
    assert!(
        run.stderr
            .contains("the value of `vars.v`: its aliases expand it past")
            && run.stderr.contains("MAX_YAML_EXPANDED_BYTES"),
        "{}",
        tail(&run.stderr)
    );
}

#[test]
fn a_plan_yaml_whose_aliases_expand_past_the_budget_is_refused_by_resume() {
    let orch = Orch::new();
    let id = demo_run_stopped_at(&orch, "created");
    let plan = orch.path().join(".orch/runs").join(&id).join("plan.yaml");
    let text = std::fs::read_to_string(&plan).unwrap();
    assert!(text.contains("\nvars: {}\n"), "{text}");
    let bomb = text.replace("\nvars: {}\n", &format!("\nvars:\n{}", fan_out()));
    assert!(bomb.len() < 1 << 20);
    std::fs::write(&plan, bomb).unwrap();

    let named = |run: &Run| {
        run.stderr.contains(&format!("{id}/plan.yaml"))
            && run.stderr.contains("its aliases expand it past")
            && run.stderr.contains("MAX_YAML_EXPANDED_BYTES")
    };
    let all = capped(&orch, &["resume", "--all"]);
    assert_eq!(all.code, 4, "{all:?}");
    assert!(named(&all) && all.stderr.contains("skipped"), "{all:?}");
    let one = capped(&orch, &["resume", &id]);
    assert_ne!(one.code, 0, "{one:?}");
    assert!(named(&one), "{one:?}");
    // Nothing was submitted: the run has no attempt.
    let history = orch.expect(&["history", &id, "--json"], 0).json();
    assert_eq!(
        history["attempts"].as_array().map(Vec::len),
        Some(0),
        "{history}"
    );
}

/// An attempt's own `plan.yaml` (which resume replays to rebuild what was tried) replaced by a
/// FIFO: resume refuses it by name at once instead of blocking on the read, and submits nothing.
#[test]
fn an_attempts_plan_yaml_replaced_by_a_fifo_is_refused_by_resume() {
    let orch = Orch::new();
    let id = demo_run_stopped_at(&orch, "submitted");
    let plan = orch
        .path()
        .join(".orch/runs")
        .join(&id)
        .join("attempts/1/plan.yaml");
    assert!(plan.is_file(), "{}", plan.display());
    std::fs::remove_file(&plan).unwrap();
    let made = Command::new("mkfifo").arg(&plan).status().expect("mkfifo");
    assert!(made.success());
    let one = capped(&orch, &["resume", &id]);
    assert_ne!(one.code, 0, "{one:?}");
    assert!(
        one.stderr.contains("attempts/1/plan.yaml")
            && one.stderr.contains("not a regular file but a FIFO"),
        "{one:?}"
    );
    let history = orch.expect(&["history", &id, "--json"], 0).json();
    assert_eq!(
        history["attempts"].as_array().map(Vec::len),
        Some(1),
        "{history}"
    );
}

#[test]
fn a_dataset_that_is_a_link_to_dev_zero_or_a_fifo_is_refused_by_name() {
    let orch = Orch::new();
    let datasets = orch.path().join("datasets");
    std::fs::create_dir_all(&datasets).unwrap();
    let zero = datasets.join("zero.yaml");
    std::os::unix::fs::symlink("/dev/zero", &zero).unwrap();
    let run = capped(&orch, &["estimate", "diamonds-seed0"]);
    assert_eq!(run.code, 2, "{run:?}");
    assert!(
        run.stderr
            .contains("datasets/zero.yaml: not a regular file but a character device"),
        "{run:?}"
    );
    std::fs::remove_file(&zero).unwrap();

    let fifo = datasets.join("fifo.yaml");
    let made = Command::new("mkfifo").arg(&fifo).status().expect("mkfifo");
    assert!(made.success());
    let run = capped(
        &orch,
        &[
            "submit",
            "--backend",
            "local",
            "--simulate",
            "diamonds-seed0",
        ],
    );
    assert_eq!(run.code, 2, "{run:?}");
    assert!(
        run.stderr
            .contains("datasets/fifo.yaml: not a regular file but a FIFO"),
        "{run:?}"
    );
    nothing_submitted(&orch);
}

#[test]
fn an_experiment_or_template_file_not_regular_or_past_the_size_limit_is_refused_by_name() {
    let orch = Orch::new();
    let experiments = orch.path().join("experiments");
    std::os::unix::fs::symlink("/dev/zero", experiments.join("zero.yaml")).unwrap();
    let run = capped(&orch, &["render", "zero"]);
    assert_eq!(run.code, 2, "{run:?}");
    assert!(
        run.stderr
            .contains("experiments/zero.yaml: not a regular file but a character device"),
        "{run:?}"
    );
    // One byte past the size limit, refused before it is parsed.
    let huge = format!("description: huge\n{}\n", "#".repeat(1 << 20));
    std::fs::write(experiments.join("huge.yaml"), &huge).unwrap();
    let run = capped(&orch, &["render", "huge"]);
    assert_eq!(run.code, 2, "{run:?}");
    assert!(
        run.stderr.contains(&format!(
            "experiments/huge.yaml: {} bytes, more than the 1048576 bytes (1 MiB)",
            huge.len()
        )) && run.stderr.contains("MAX_CONFIG_BYTES"),
        "{run:?}"
    );
    // A template's file, read through the catalog like every configuration file.
    let template = orch.path().join("templates/verl-grpo");
    std::fs::create_dir_all(&template).unwrap();
    let made = Command::new("mkfifo")
        .arg(template.join("keys.yaml"))
        .status()
        .expect("mkfifo");
    assert!(made.success());
    let run = capped(&orch, &["render", "diamonds-seed0"]);
    assert_eq!(run.code, 2, "{run:?}");
    assert!(
        run.stderr
            .contains("templates/verl-grpo/keys.yaml: not a regular file but a FIFO"),
        "{run:?}"
    );
}

#[test]
fn a_model_config_path_to_dev_zero_is_refused_and_nothing_is_submitted() {
    let orch = Orch::new().newcomer();
    let set = ["--set", "model.config=/dev/zero"];
    let run = capped(&orch, &[&["estimate", "pretrain-512m"][..], &set].concat());
    assert_ne!(run.code, 0, "{run:?}");
    assert!(
        run.stderr
            .contains("/dev/zero: not a regular file but a character device"),
        "{run:?}"
    );
    let run = capped(
        &orch,
        &[
            &[
                "submit",
                "--backend",
                "local",
                "--simulate",
                "pretrain-512m",
            ][..],
            &set,
        ]
        .concat(),
    );
    assert_ne!(run.code, 0, "{run:?}");
    assert!(
        run.stderr.contains("/dev/zero: not a regular file")
            && run.stderr.contains("nothing was submitted"),
        "{run:?}"
    );
    nothing_submitted(&orch);
}

/// Copy the repository's directory `from` into the project's `to`, subdirectories included.
fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let path = entry.unwrap().path();
        let target = to.join(path.file_name().unwrap());
        if path.is_dir() {
            copy_dir(&path, &target);
        } else {
            std::fs::copy(&path, target).unwrap();
        }
    }
}

#[test]
fn every_shipped_configuration_file_still_loads_from_a_project_directory() {
    let orch = Orch::new().newcomer();
    // `models/` is orch's own table, compiled in: orch-memory's `input` tests read its files.
    for dir in [
        "experiments",
        "profiles",
        "datasets",
        "ladders",
        "templates",
    ] {
        copy_dir(&repo_root().join(dir), &orch.path().join(dir));
    }
    let profiles = capped(&orch, &["profiles"]);
    assert_eq!(profiles.code, 0, "{profiles:?}");
    let listed = capped(&orch, &["experiments", "--json"]);
    assert_eq!(listed.code, 0, "{listed:?}");
    let listed = listed.json();
    let files = listed.as_array().expect("a list");
    assert!(files.len() >= 5, "{listed}");
    for file in files {
        let origin = file["origin"].as_str().unwrap_or_default();
        assert!(origin.starts_with("./experiments/"), "{file}");
        // One experiment of each file: a sweep's first member stands for the rest.
        let name = file["members"][0]
            .as_str()
            .or(file["name"].as_str())
            .expect("a name");
        let out = orch.path().join("out").join(name);
        let render = capped(&orch, &["render", name, "--out", out.to_str().unwrap()]);
        assert_eq!(render.code, 0, "render {name}: {render:?}");
        // The estimate reads the project's datasets and orch's model table as well.
        let estimate = capped(&orch, &["estimate", name]);
        assert_eq!(estimate.code, 0, "estimate {name}: {estimate:?}");
    }
}
