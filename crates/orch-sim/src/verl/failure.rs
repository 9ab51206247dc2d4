//! verl's failure output: the driver's Hydra error and Ray-wrapped traceback down to the
//! worker's exception, per failure kind (torch OOM in `update_actor`, vLLM start-up and wake-up
//! errors, Ray's host-memory monitor, too few GPUs), as the real run prints it to stderr.

use super::super::Ctx;
use super::super::memory::{self, FailAt, FailKind, Failure};
use super::super::report::{self, Framework, OwnProcess, RayOom};
use super::Run;

/// Hydra's banner plus the driver's traceback down to the TaskRunner's RayTaskError.
fn driver_head(ctx: &mut Ctx, r: &Run, cls: &str) {
    let given: Vec<String> = r.o.given.iter().map(|g| format!("'{g}'")).collect();
    ctx.err(format!(
        "Error executing job with overrides: [{}]",
        given.join(", ")
    ));
    ctx.err("Traceback (most recent call last):");
    for l in report::verl_driver_frames() {
        ctx.err(l);
    }
    ctx.err(report::ray_task_error(
        cls,
        "TaskRunner.run",
        r.taskrunner,
        &ctx.ids,
        "main_ppo.TaskRunner",
    ));
}

fn worker_error_head(ctx: &mut Ctx, r: &Run, cls: &str, method: &str) {
    for l in report::frame(
        "verl/single_controller/ray/base.py",
        50,
        "__call__",
        "output = ray.get(output)",
    ) {
        ctx.err(l);
    }
    ctx.err(report::ray_task_error(
        cls,
        &format!("WorkerDict.actor_rollout_ref_{method}"),
        r.worker,
        &ctx.ids,
        "verl.single_controller.ray.base.WorkerDict",
    ));
    for (f, l, func, src) in [
        (
            "verl/single_controller/ray/base.py",
            705,
            "func",
            "return getattr(self.worker_dict[key], name)(*args, **kwargs)",
        ),
        (
            "verl/single_controller/base/decorator.py",
            514,
            "inner",
            "return func(*args, **kwargs)",
        ),
    ] {
        for line in report::frame(f, l, func, src) {
            ctx.err(line);
        }
    }
}

fn hydra_tail(ctx: &mut Ctx) {
    ctx.err("");
    ctx.err("Set the environment variable HYDRA_FULL_ERROR=1 for a complete stack trace.");
}

fn frames(ctx: &mut Ctx, list: &[(&str, u32, &str, &str)]) {
    for (f, l, func, src) in list {
        for line in report::frame(f, *l, func, src) {
            ctx.err(line);
        }
    }
}

/// Print the real failure output for `f` and return verl's exit code (1).
pub(super) fn fail_exit(ctx: &mut Ctx, r: &Run, f: &Failure) -> i32 {
    let vl = report::Stamp::now().vllm();
    match &f.kind {
        FailKind::GpuOom(d) => {
            let msg = report::torch_oom_message(d, &[], OwnProcess::ThisProcess);
            ctx.err(r.wd(&format!("torch.OutOfMemoryError: {msg}")));
            driver_head(ctx, r, "OutOfMemoryError");
            frames(
                ctx,
                &[
                    ("verl/trainer/main_ppo.py", 317, "run", "trainer.fit()"),
                    (
                        "verl/trainer/ppo/ray_trainer.py",
                        1290,
                        "fit",
                        "actor_output = self.actor_rollout_wg.update_actor(batch)",
                    ),
                ],
            );
            worker_error_head(ctx, r, "OutOfMemoryError", "update_actor");
            if !matches!(
                d.site,
                memory::Site::Params | memory::Site::RefParams | memory::Site::Static
            ) {
                frames(
                    ctx,
                    &[(
                        "verl/workers/fsdp_workers.py",
                        868,
                        "update_actor",
                        "metrics = self.actor.update_policy(data=data)",
                    )],
                );
            }
            for l in report::torch_site_frames(d.site, Framework::Verl) {
                ctx.err(l);
            }
            ctx.err(format!("torch.OutOfMemoryError: {msg}"));
            hydra_tail(ctx);
        }
        FailKind::VllmWakeUp { .. } => {
            ctx.err(r.wd("CUDA Error: out of memory at /workspace/csrc/cumem_allocator.cpp:62"));
            driver_head(ctx, r, "RuntimeError");
            frames(
                ctx,
                &[
                    ("verl/trainer/main_ppo.py", 317, "run", "trainer.fit()"),
                    (
                        "verl/trainer/ppo/ray_trainer.py",
                        1180,
                        "fit",
                        "gen_batch_output = self.actor_rollout_wg.generate_sequences(gen_batch)",
                    ),
                ],
            );
            worker_error_head(ctx, r, "RuntimeError", "generate_sequences");
            frames(
                ctx,
                &[
                    (
                        "verl/workers/fsdp_workers.py",
                        903,
                        "generate_sequences",
                        "loop.run_until_complete(self.rollout_mode())",
                    ),
                    (
                        "/usr/lib/python3.10/asyncio/base_events.py",
                        649,
                        "run_until_complete",
                        "return future.result()",
                    ),
                    (
                        "verl/workers/fsdp_workers.py",
                        702,
                        "rollout_mode",
                        "await self.rollout.resume(tags=[\"weights\"])",
                    ),
                    (
                        "vllm/v1/worker/gpu_worker.py",
                        131,
                        "wake_up",
                        "allocator.wake_up(tags)",
                    ),
                    (
                        "vllm/device_allocator/cumem.py",
                        219,
                        "wake_up",
                        "create_and_map(handle)",
                    ),
                    (
                        "vllm/device_allocator/cumem.py",
                        75,
                        "create_and_map",
                        "python_create_and_map(*allocation_handle)",
                    ),
                ],
            );
            ctx.err(
                "RuntimeError: CUDA Error: out of memory at /workspace/csrc/cumem_allocator.cpp:62",
            );
            hydra_tail(ctx);
        }
        FailKind::VllmFreeMemory { .. }
        | FailKind::VllmNoCacheBlocks { .. }
        | FailKind::VllmMaxLen { .. } => {
            let msg = match &f.kind {
                FailKind::VllmFreeMemory {
                    free_gib,
                    total_gib,
                    util,
                    requested_gib,
                } => report::vllm_free_memory(*free_gib, *total_gib, *util, *requested_gib),
                FailKind::VllmNoCacheBlocks { .. } => report::vllm_no_cache_blocks(),
                FailKind::VllmMaxLen {
                    max_model_len,
                    needed_gib,
                    available_gib,
                    estimated_max_len,
                } => report::vllm_max_len(
                    *max_model_len,
                    *needed_gib,
                    *available_gib,
                    *estimated_max_len,
                ),
                _ => unreachable!(),
            };
            let pre = format!(
                "(EngineCore_DP0 pid={}) ERROR {vl} [core.py:708] ",
                r.engine
            );
            ctx.err(format!("{pre}EngineCore failed to start."));
            ctx.err(format!("{pre}Traceback (most recent call last):"));
            let mut fr: Vec<(&str, u32, &str, &str)> = vec![
                (
                    "vllm/v1/engine/core.py",
                    699,
                    "run_engine_core",
                    "engine_core = EngineCoreProc(*args, **kwargs)",
                ),
                (
                    "vllm/v1/engine/core.py",
                    498,
                    "__init__",
                    "super().__init__(vllm_config, executor_class, log_stats,",
                ),
            ];
            if matches!(f.kind, FailKind::VllmFreeMemory { .. }) {
                fr.extend([
                    (
                        "vllm/v1/engine/core.py",
                        83,
                        "__init__",
                        "self.model_executor = executor_class(vllm_config)",
                    ),
                    (
                        "vllm/executor/executor_base.py",
                        54,
                        "__init__",
                        "self._init_executor()",
                    ),
                    (
                        "vllm/executor/uniproc_executor.py",
                        54,
                        "_init_executor",
                        "self.collective_rpc(\"init_device\")",
                    ),
                    (
                        "vllm/worker/worker_base.py",
                        603,
                        "init_device",
                        "self.worker.init_device()  # type: ignore",
                    ),
                    (
                        "vllm/v1/worker/gpu_worker.py",
                        180,
                        "init_device",
                        "raise ValueError(",
                    ),
                ]);
            } else {
                fr.extend([
                    (
                        "vllm/v1/engine/core.py",
                        92,
                        "__init__",
                        "self._initialize_kv_caches(vllm_config)",
                    ),
                    (
                        "vllm/v1/engine/core.py",
                        199,
                        "_initialize_kv_caches",
                        "kv_cache_configs = get_kv_cache_configs(vllm_config, kv_cache_specs,",
                    ),
                    (
                        "vllm/v1/core/kv_cache_utils.py",
                        1243,
                        "get_kv_cache_configs",
                        "check_enough_kv_cache_memory(vllm_config, kv_cache_spec_one_worker,",
                    ),
                    (
                        "vllm/v1/core/kv_cache_utils.py",
                        700,
                        "check_enough_kv_cache_memory",
                        "raise ValueError(",
                    ),
                ]);
            }
            for (file, l, func, src) in fr {
                for line in report::frame(file, l, func, src) {
                    ctx.err(format!("{pre}{line}"));
                }
            }
            ctx.err(format!("{pre}ValueError: {msg}"));
            ctx.err(format!(
                "(EngineCore_DP0 pid={}) Process EngineCore_DP0:",
                r.engine
            ));
            driver_head(ctx, r, "RuntimeError");
            frames(
                ctx,
                &[
                    (
                        "verl/trainer/main_ppo.py",
                        305,
                        "run",
                        "trainer.init_workers()",
                    ),
                    (
                        "verl/trainer/ppo/ray_trainer.py",
                        1010,
                        "init_workers",
                        "self.actor_rollout_wg.init_model()",
                    ),
                ],
            );
            worker_error_head(ctx, r, "RuntimeError", "init_model");
            frames(
                ctx,
                &[
                    (
                        "verl/workers/fsdp_workers.py",
                        760,
                        "init_model",
                        "self._build_rollout(trust_remote_code=self.config.model.get(\"trust_remote_code\", False))",
                    ),
                    (
                        "vllm/v1/engine/core_client.py",
                        442,
                        "__init__",
                        "with launch_core_engines(vllm_config, executor_class,",
                    ),
                    (
                        "vllm/v1/engine/utils.py",
                        765,
                        "wait_for_engine_startup",
                        "raise RuntimeError(\"Engine core initialization failed. \"",
                    ),
                ],
            );
            ctx.err("RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {}");
            hydra_tail(ctx);
        }
        FailKind::HostOom {
            used_gib,
            total_gib,
            worker_gib,
            task,
        } => {
            let st = report::Stamp::now();
            let raylet = ctx.ids.pid("raylet");
            ctx.err(format!(
                "(raylet) [{} E {raylet} {raylet}] (raylet) node_manager.cc:3099: 1 Workers (tasks / actors) killed due to memory pressure (OOM), 0 Workers crashed due to other reasons at node (ID: {}, IP: 127.0.0.1) over the last time period. To see more information about the Workers killed on this node, use `ray logs raylet.out -ip 127.0.0.1`",
                st.ray(),
                ctx.ids.hex("node", 56)
            ));
            driver_head(ctx, r, "OutOfMemoryError");
            if f.at == FailAt::Init {
                frames(
                    ctx,
                    &[
                        (
                            "verl/trainer/main_ppo.py",
                            305,
                            "run",
                            "trainer.init_workers()",
                        ),
                        (
                            "verl/trainer/ppo/ray_trainer.py",
                            1010,
                            "init_workers",
                            "self.actor_rollout_wg.init_model()",
                        ),
                    ],
                );
            } else {
                frames(
                    ctx,
                    &[
                        ("verl/trainer/main_ppo.py", 317, "run", "trainer.fit()"),
                        (
                            "verl/trainer/ppo/ray_trainer.py",
                            1290,
                            "fit",
                            "actor_output = self.actor_rollout_wg.update_actor(batch)",
                        ),
                    ],
                );
            }
            frames(
                ctx,
                &[(
                    "verl/single_controller/ray/base.py",
                    50,
                    "__call__",
                    "output = ray.get(output)",
                )],
            );
            let msg = report::ray_host_oom(&RayOom {
                ids: &ctx.ids,
                task_name: task,
                pid: r.worker,
                worker_gb: *worker_gib,
                used_gb: *used_gib,
                total_gb: *total_gib,
            });
            ctx.err(format!("ray.exceptions.OutOfMemoryError: {msg}"));
            hydra_tail(ctx);
        }
        FailKind::NotEnoughGpus {
            available,
            required,
        } => {
            driver_head(ctx, r, "ValueError");
            frames(
                ctx,
                &[
                    (
                        "verl/trainer/main_ppo.py",
                        305,
                        "run",
                        "trainer.init_workers()",
                    ),
                    (
                        "verl/trainer/ppo/ray_trainer.py",
                        871,
                        "init_workers",
                        "self.resource_pool_manager.create_resource_pool()",
                    ),
                    (
                        "verl/trainer/ppo/ray_trainer.py",
                        131,
                        "create_resource_pool",
                        "self._check_resource_available()",
                    ),
                    (
                        "verl/trainer/ppo/ray_trainer.py",
                        171,
                        "_check_resource_available",
                        "raise ValueError(",
                    ),
                ],
            );
            ctx.err(format!(
                "ValueError: Total available GPUs {available} is less than total desired GPUs {required}."
            ));
            hydra_tail(ctx);
        }
        FailKind::SglangNotEnough { .. } => unreachable!("verl uses vLLM"),
    }
    ctx.finish(
        1,
        &format!("simulated verl failure: {}", super::super::describe(f)),
    )
}
