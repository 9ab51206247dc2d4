//! RL Swarm (seed 004) end to end on the local backend and the simulated node: the built-in
//! `rl-swarm-qwen` as its user first ran it (float32, no checkpointing, Qwen2.5-1.5B on an
//! RTX 4090) fails with a GPU OOM and the ladder makes it fit; with preflight the first attempt
//! already fits. A node that swallows its OOM as genrl 0.1.11 does (`ORCH_SIM_SWALLOW`) is stopped
//! at the line its template declares and answered the same way.

use crate::support::{Orch, attempts};

/// The steps an attempt took (`fp16+gradient-checkpointing` → both names).
fn steps(attempt: &serde_json::Value) -> Vec<String> {
    attempt["steps"]
        .as_array()
        .map(|s| {
            s.iter()
                .filter_map(|v| v.as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn seed_004_fails_with_a_gpu_oom_and_the_ladder_makes_it_fit() {
    let orch = Orch::new();
    let run = orch.submit_simulated(&["rl-swarm-qwen", "--preflight=off", "--json"], 0);
    let id = run.json()["run"].as_str().unwrap().to_string();
    let history = orch.expect(&["history", &id, "--json"], 0).json();
    assert_eq!(history["state"], "succeeded", "{run:?}");
    let list = attempts(&history);
    assert!(list.len() >= 2, "{history}");
    assert_eq!(list[0]["outcome"], "gpu_oom", "{}", list[0]);
    assert_eq!(list[0]["step"], "base");
    assert_eq!(list[0]["overrides"]["training.dtype"], "float32");
    // The simulated node printed torch's message with the card's capacity; orch kept it.
    let memory = &list[0]["evidence"]["memory"];
    assert_eq!(memory["capacity_gib"], 23.65, "{memory}");
    let last = list.last().unwrap();
    assert_eq!(last["outcome"], "succeeded", "{history}");
    assert!(steps(last).iter().any(|s| s == "fp16"), "{last}");
    assert_eq!(last["overrides"]["training.dtype"], "float16", "{last}");
    // Every attempt before the last one failed for memory, and none changed the model.
    for a in &list[..list.len() - 1] {
        assert_eq!(a["outcome"], "gpu_oom", "{a}");
    }
    assert_eq!(
        last["overrides"]["game_manager.trainer.models.0.pretrained_model_name_or_path"],
        "Gensyn/Qwen2.5-1.5B-Instruct",
        "{last}"
    );
    let logs = orch.expect(&["logs", &id, "--attempt", "1", "--stderr"], 0);
    assert!(
        logs.stdout.contains("Error executing job with overrides:")
            && logs
                .stdout
                .contains("torch.OutOfMemoryError: CUDA out of memory."),
        "{logs:?}"
    );
}

#[test]
fn with_preflight_the_first_attempt_already_fits() {
    let orch = Orch::new().newcomer();
    let run = orch.submit_simulated(&["rl-swarm-qwen", "--json"], 0);
    assert!(run.stderr.contains("preflight: "), "{run:?}");
    let id = run.json()["run"].as_str().unwrap().to_string();
    let history = orch.expect(&["history", &id, "--json"], 0).json();
    assert_eq!(history["state"], "succeeded", "{history}");
    let list = attempts(&history);
    let failed = list.iter().filter(|a| a["outcome"] != "succeeded").count();
    assert_eq!(failed, 0, "{history}");
    assert_eq!(list.len(), 1, "{history}");
    // Preflight took the ladder's steps that keep what the node trains.
    let taken = steps(&list[0]);
    assert!(taken.iter().any(|s| s == "fp16"), "{taken:?}");
    assert!(!taken.iter().any(|s| s == "smaller-model"), "{taken:?}");
}

#[test]
fn a_training_oom_genrl_swallows_is_stopped_and_answered_like_any_other() {
    // genrl logs "Error occurred during training, continuing..." and plays on; the template
    // declares that line fatal at its first report.
    let orch = Orch::new()
        .env("ORCH_SIM_SWALLOW", "1")
        .env("ORCH_SIM_STEPS", "50")
        .env("ORCH_SIM_STEP_SECONDS", "0.2");
    let run = orch.submit_simulated(&["rl-swarm-qwen", "--preflight=off", "--json"], 0);
    assert!(
        run.stderr
            .contains("reported a failure it carries on past (line "),
        "{run:?}"
    );
    let id = run.json()["run"].as_str().unwrap().to_string();
    let history = orch.expect(&["history", &id, "--json"], 0).json();
    assert_eq!(history["state"], "succeeded", "{history}");
    let list = attempts(&history);
    assert!(list.len() >= 2, "{history}");
    assert_eq!(list[0]["outcome"], "gpu_oom", "{}", list[0]);
    assert_eq!(list[0]["step"], "base");
    let evidence = list[0]["evidence"]["text"].as_str().unwrap();
    assert!(
        evidence.ends_with("Error occurred during training, continuing..."),
        "{evidence}"
    );
    // Stopped at the first report, long before its 50 rounds: the simulator's own end line
    // never came.
    let logs = orch.expect(&["logs", &id, "--attempt", "1"], 0);
    assert!(!logs.stdout.contains("rounds 1..50 completed"), "{logs:?}");
    assert!(!logs.stdout.contains("Starting round: 10/"), "{logs:?}");
    let last = list.last().unwrap();
    assert_eq!(last["outcome"], "succeeded", "{history}");
    assert!(steps(last).iter().any(|s| s == "fp16"), "{last}");
}

#[test]
fn a_generation_oom_genrl_logs_before_exiting_0_is_not_a_success() {
    // genrl's run_game logs the OOM with its traceback and returns: the process exits 0.
    let orch = Orch::new().env("ORCH_SIM_SWALLOW", "1");
    let run = orch.submit_simulated(
        &[
            "rl-swarm-qwen",
            "--preflight=off",
            "--max-attempts",
            "1",
            "--set",
            "game_manager.data_manager.num_train_samples=64",
            "--set",
            "training.num_generations=32",
            "--set",
            "++game_manager.trainer.config.max_new_tokens=16384",
            "--json",
        ],
        1,
    );
    let id = run.json()["run"].as_str().unwrap().to_string();
    let history = orch.expect(&["history", &id, "--json"], 0).json();
    let list = attempts(&history);
    // Not "succeeded": the log reported a failure the template declares fatal.
    assert_eq!(list[0]["outcome"], "gpu_oom", "{}", list[0]);
    // The evidence is torch's message below genrl's ERROR line, with its numbers.
    let evidence = &list[0]["evidence"];
    assert!(
        evidence["text"]
            .as_str()
            .unwrap()
            .starts_with("torch.OutOfMemoryError: CUDA out of memory."),
        "{evidence}"
    );
    assert_eq!(evidence["memory"]["capacity_gib"], 23.65, "{evidence}");
    let logs = orch.expect(&["logs", &id, "--attempt", "1"], 0);
    assert!(
        logs.stdout.contains("run_game returned; exit 0"),
        "{logs:?}"
    );
}
