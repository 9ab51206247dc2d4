//! The seeds' configurations as the trainers' own keys (`shared/seeds/`): what the estimator
//! is calibrated against, and what tests of the simulator and the planner start from.

/// Seed 002's diamonds-seed0 run as first submitted (calibration target (a)). Its verl
/// computed the entropy in the update (before verl 0.4 it always did, with a default
/// coefficient of 0.001); on today's verl that takes a non-zero `entropy_coeff`.
pub fn diamonds() -> Vec<(&'static str, &'static str)> {
    vec![
        ("algorithm.adv_estimator", "grpo"),
        ("actor_rollout_ref.actor.entropy_coeff", "0.001"),
        ("actor_rollout_ref.model.path", "Qwen/Qwen2.5-7B-Instruct"),
        ("data.train_batch_size", "1024"),
        ("data.max_prompt_length", "512"),
        ("data.max_response_length", "1024"),
        ("actor_rollout_ref.actor.ppo_mini_batch_size", "256"),
        ("actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu", "32"),
        ("actor_rollout_ref.actor.fsdp_config.param_offload", "False"),
        (
            "actor_rollout_ref.actor.fsdp_config.optimizer_offload",
            "False",
        ),
        (
            "actor_rollout_ref.model.enable_gradient_checkpointing",
            "True",
        ),
        ("actor_rollout_ref.rollout.n", "5"),
        ("actor_rollout_ref.rollout.gpu_memory_utilization", "0.6"),
        ("actor_rollout_ref.rollout.tensor_model_parallel_size", "1"),
        ("trainer.n_gpus_per_node", "4"),
        ("trainer.nnodes", "1"),
    ]
}

/// Seed 000's AReaL GSM8K run with its default (non-A40) settings (calibration target (h)).
pub fn areal_default() -> Vec<(&'static str, &'static str)> {
    vec![
        ("actor.path", "Qwen/Qwen2.5-1.5B-Instruct"),
        ("sglang.mem_fraction_static", "0.8"),
        ("train_dataset.batch_size", "8"),
        ("gconfig.max_new_tokens", "512"),
        ("actor.mb_spec.max_tokens_per_mb", "5120"),
        ("rollout.max_concurrent_rollouts", "32"),
        ("actor.gradient_checkpointing", "false"),
    ]
}

/// Seed 000's A40-optimized settings (calibration target (h')).
pub fn areal_a40_optimized() -> Vec<(&'static str, &'static str)> {
    vec![
        ("actor.path", "Qwen/Qwen2.5-1.5B-Instruct"),
        ("sglang.mem_fraction_static", "0.5"),
        ("train_dataset.batch_size", "4"),
        ("gconfig.max_new_tokens", "256"),
        ("actor.mb_spec.max_tokens_per_mb", "4096"),
        ("rollout.max_concurrent_rollouts", "16"),
        ("actor.gradient_checkpointing", "true"),
    ]
}

/// Seed 004's rl-swarm node as its user first ran it on an RTX 4090: rg-swarm.yaml's float32,
/// no gradient checkpointing, the large pool's Qwen2.5-1.5B (rl-swarm's keys, as Hydra
/// overrides).
pub fn rl_swarm_seed_004() -> Vec<(&'static str, &'static str)> {
    vec![
        (
            "game_manager.trainer.models.0.pretrained_model_name_or_path",
            "Gensyn/Qwen2.5-1.5B-Instruct",
        ),
        ("training.dtype", "float32"),
        (
            "++game_manager.trainer.config.enable_gradient_checkpointing",
            "false",
        ),
        ("training.num_generations", "2"),
        ("training.num_transplant_trees", "2"),
        ("game_manager.data_manager.num_train_samples", "2"),
        ("++training.gradient_accumulation_steps", "1"),
    ]
}
