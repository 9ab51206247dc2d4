//! RL Swarm (seed 004) end to end on the local backend and the simulated node: the built-in
//! `rl-swarm-qwen` as its user first ran it (float32, no checkpointing, Qwen2.5-1.5B on an
//! RTX 4090) fails with a GPU OOM and the ladder makes it fit; with preflight the first attempt
//! already fits.

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
