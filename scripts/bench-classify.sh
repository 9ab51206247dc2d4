#!/usr/bin/env bash
# Benchmark `orch classify` against `grep -E` with the same signatures on a ~1 GB log.
#
#   scripts/bench-classify.sh [SIZE_MB]        (default 1024)
#
# Env: KEEP=1 keeps the generated log (path printed); RUNS=N timed runs per tool (default 3);
#      BENCH_DIR=dir generates into (or reuses a log already in) dir instead of a fresh temp
#      dir; NO_BUILD=1 skips cargo; GEN_ONLY=1 only generates the log (use with BENCH_DIR).
#
# The log is a realistic verl-on-Slurm stream: Ray-prefixed progress bars (with `\r`
# rewrites), metric lines, vLLM INFO lines, verl memory reports, recovered warnings
# (vLLM RECOMPUTE preemption, SGLang retract, verl sleep-level), `set -x` echoes, a config
# dump, periodic caught tracebacks, and ONE real CUDA OOM (Ray-wrapped) near the end,
# followed by the NCCL watchdog noise and Hydra's last words.
# Expected verdict: gpu_oom.
set -euo pipefail

SIZE_MB=${1:-1024}
RUNS=${RUNS:-3}
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
ORCH=${ORCH:-$ROOT/target/release/orch}
export LC_ALL=C

if [[ -z ${NO_BUILD:-} ]]; then
    (cd "$ROOT" && cargo build --release --quiet)
fi
[[ -x $ORCH ]] || { echo "error: $ORCH not built" >&2; exit 1; }

if [[ -n ${BENCH_DIR:-} ]]; then
    DIR=$BENCH_DIR
    mkdir -p "$DIR"
else
    DIR=$(mktemp -d "${TMPDIR:-/tmp}/bench-classify.XXXXXX")
    [[ -n ${KEEP:-} ]] || trap 'rm -rf "$DIR"' EXIT
fi
LOG=$DIR/train.log
PATTERNS=$DIR/patterns.ere

# ---------------------------------------------------------------- generate the log
gen_block() {
    # ~4 MiB of noise; $1 = block number (varies pids/steps a little).
    awk -v blk="$1" 'BEGIN {
        srand(blk + 7);
        pid = 2841; wpid = 231421 + (blk % 8);
        for (i = 0; i < 9000; i++) {
            step = blk * 9000 + i;
            pct = int((step % 1000) / 10);
            r = i % 50;
            if (r < 20) {
                # tqdm rewrite: several \r segments on one line
                printf "(TaskRunner pid=%d) Training Progress:  %d%%|##        | %d/1000 [12:%02d<1:23:45,  5.%02ds/it]\r", pid, pct, step % 1000, i % 60, i % 100;
                printf "(TaskRunner pid=%d) Training Progress:  %d%%|###       | %d/1000 [12:%02d<1:23:44,  5.%02ds/it]\n", pid, pct, step % 1000 + 1, i % 60, (i + 7) % 100;
            } else if (r < 32) {
                printf "(TaskRunner pid=%d) step:%d - global_seqlen/min:%d - global_seqlen/max:%d - actor/entropy:%.4f - actor/pg_loss:%.5f - actor/pg_clipfrac:%.5f - actor/ppo_kl:%.6f - actor/grad_norm:%.4f - perf/max_memory_allocated_gb:%.2f - perf/max_memory_reserved_gb:%.2f - perf/cpu_memory_used_gb:%.2f - timing_s/gen:%.3f - timing_s/update_actor:%.3f - response_length/mean:%.2f - critic/score/mean:%.4f\n", pid, step, 11000 + i % 977, 15000 + i % 1331, rand(), rand() / 10, rand() / 100, rand() / 1000, rand() * 3, 50 + rand() * 20, 60 + rand() * 15, 100 + rand() * 40, 20 + rand() * 9, 30 + rand() * 9, 300 + rand() * 200, rand();
            } else if (r < 40) {
                printf "(WorkerDict pid=%d) INFO 03-14 14:%02d:%02d [gpu_model_runner.py:1%03d] Graph capturing finished in %d secs, took %.2f GiB\n", wpid, i % 60, (i * 7) % 60, i % 1000, 5 + i % 20, rand();
            } else if (r < 45) {
                printf "(WorkerDict pid=%d) After switch to rollout mode, memory allocated (GB): %.2f, memory reserved (GB): %.2f, device memory used/total (GB): %.2f/79.11\n", wpid, 10 + rand() * 5, 15 + rand() * 5, 55 + rand() * 20;
            } else if (r == 45) {
                printf "(WorkerDict pid=%d) WARNING 03-14 14:33:45 scheduler.py:1057 Sequence group %d is preempted by PreemptionMode.RECOMPUTE mode because there is not enough KV cache space. This can affect the end-to-end performance. Increase gpu_memory_utilization or tensor_parallel_size to provide more KV cache memory. total_cumulative_preemption_cnt=%d\n", wpid, step, i;
            } else if (r == 46) {
                printf "[2025-07-02 07:41:59 DP0 TP0] KV cache pool is full. Retract requests. #retracted_reqs: 1, #new_tokens_gained: 646, #new_token_ratio: 0.0980 -> 0.3487\n";
            } else if (r == 47) {
                printf "(WorkerDict pid=%d) WARNING:2025-03-14 14:33:45,123:Setting the sleep level to 1 may cause a memory overflow.\n", wpid;
            } else if (r == 48 && i % 1000 == 48) {
                # a caught, logged exception (wandb retry) with its traceback
                printf "(TaskRunner pid=%d) wandb: Network error (ConnectionError), entering retry loop.\n", pid;
                printf "(TaskRunner pid=%d) Traceback (most recent call last):\n", pid;
                printf "(TaskRunner pid=%d)   File \"/usr/local/lib/python3.10/dist-packages/wandb/sdk/internal/internal_api.py\", line 331, in execute\n", pid;
                printf "(TaskRunner pid=%d)     return self.client.execute(*args, **kwargs)\n", pid;
                printf "(TaskRunner pid=%d)   File \"/usr/local/lib/python3.10/dist-packages/requests/adapters.py\", line 519, in send\n", pid;
                printf "(TaskRunner pid=%d)     raise ConnectionError(e, request=request)\n", pid;
                printf "(TaskRunner pid=%d) requests.exceptions.ConnectionError: HTTPSConnectionPool(host=\047api.wandb.ai\047, port=443): Read timed out.\n", pid;
            } else if (i % 500 == 49) {
                printf "+ echo \047step %d done; if CUDA out of memory appears, lower ppo_micro_batch_size_per_gpu\047\n", step;
            } else {
                printf "(WorkerDict pid=%d) INFO 03-14 14:%02d:%02d [loggers.py:116] Engine 000: Avg prompt throughput: %.1f tokens/s, Avg generation throughput: %.1f tokens/s, Running: %d reqs, Waiting: 0 reqs, GPU KV cache usage: %.1f%%, Prefix cache hit rate: %.1f%%\n", wpid, i % 60, i % 60, rand() * 9000, rand() * 3000, i % 256, rand() * 100, rand() * 100;
            }
        }
    }'
}

if [[ ! -s $LOG || $(stat -c %s "$LOG") -lt $((SIZE_MB * 1024 * 1024 * 9 / 10)) ]]; then
    echo "generating ~${SIZE_MB} MB log in $DIR ..." >&2
    {
        cat <<'EOF'
+ python3 -m verl.trainer.main_ppo algorithm.adv_estimator=grpo data.train_batch_size=1024 actor_rollout_ref.rollout.gpu_memory_utilization=0.6 trainer.experiment_name=qwen7b-grpo-oom-sweep
(TaskRunner pid=2841) {'actor_rollout_ref': {'actor': {'checkpoint': {'contents': ['model', 'optimizer', 'extra']},
(TaskRunner pid=2841)                                  'fsdp_config': {'optimizer_offload': False, 'param_offload': False},
(TaskRunner pid=2841)  'trainer': {'experiment_name': 'qwen7b-grpo-CUDA out of memory-sweep', 'n_gpus_per_node': 8}}
[2025-03-29 18:18:34] server_args=ServerArgs(model_path='Qwen/Qwen2.5-7B-Instruct', mem_fraction_static=0.717, max_running_requests=None, disable_cuda_graph=False)
EOF
        # Build one ~4 MiB block set and repeat it (cat is fast); vary blocks a little.
        for b in 0 1 2 3; do gen_block "$b"; done >"$DIR/block"
        block_size=$(stat -c %s "$DIR/block")
        reps=$(( (SIZE_MB * 1024 * 1024) / block_size ))
        for ((k = 0; k < reps; k++)); do cat "$DIR/block"; done
        rm -f "$DIR/block"
        cat <<'EOF'
(WorkerDict pid=231424) Traceback (most recent call last):
(WorkerDict pid=231424)   File "/usr/local/lib/python3.10/dist-packages/verl/workers/fsdp_workers.py", line 712, in update_actor
(WorkerDict pid=231424)     metrics = self.actor.update_policy(data=data)
(WorkerDict pid=231424)   File "/usr/local/lib/python3.10/dist-packages/torch/autograd/__init__.py", line 289, in backward
(WorkerDict pid=231424)     _engine_run_backward(
(WorkerDict pid=231424) torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 17.66 GiB. GPU 3 has a total capacity of 79.14 GiB of which 4.97 GiB is free. Process 231424 has 74.16 GiB memory in use. Of the allocated memory 70.77 GiB is allocated by PyTorch, and 2.12 GiB is reserved by PyTorch but unallocated. If reserved but unallocated memory is large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  See documentation for Memory Management  (https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)
(TaskRunner pid=2841) ray.exceptions.RayTaskError(OutOfMemoryError): ray::WorkerDict.actor_rollout_ref_update_actor() (pid=231424, ip=10.130.71.7, actor_id=b2ba64f62469495ea505301701000000, repr=<verl.single_controller.ray.base.WorkerDict object at 0x7b8aac2e25c0>)
(WorkerDict pid=231421) [rank1]:[E314 14:43:45.172185860 ProcessGroupNCCL.cpp:607] [Rank 1] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=4711, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 600009 milliseconds before timing out.
Error executing job with overrides: ['algorithm.adv_estimator=grpo', 'data.train_batch_size=1024', 'actor_rollout_ref.rollout.gpu_memory_utilization=0.6']
EOF
    } >"$LOG"
fi
SIZE_BYTES=$(stat -c %s "$LOG")
echo "log: $LOG ($(( SIZE_BYTES / 1024 / 1024 )) MiB)" >&2
[[ -z ${GEN_ONLY:-} ]] || exit 0

if ! "$ORCH" classify --dump-patterns >"$PATTERNS" 2>/dev/null || [[ ! -s $PATTERNS ]]; then
    echo "error: '$ORCH classify --dump-patterns' did not print patterns (CLI flag not wired yet?)" >&2
    exit 1
fi
echo "verdict: $("$ORCH" classify "$LOG" --json)" >&2
echo "grep -E matching lines: $(grep -E -c -f "$PATTERNS" "$LOG" || true)" >&2

# Warm the page cache so both tools read from memory.
cat "$LOG" >/dev/null

# ---------------------------------------------------------------- time it
declare -A MEAN
# Output goes to real files: GNU grep treats a /dev/null stdout like -q and stops at the
# first match (even with -c), which would make it look ~100x faster than it is.
CMD_ORCH="$ORCH classify $LOG --json >$DIR/orch.out"
CMD_GREP="grep -E -c -f $PATTERNS $LOG >$DIR/grep.out"

if command -v hyperfine >/dev/null 2>&1; then
    CSV=$DIR/hyperfine.csv
    hyperfine --warmup 1 --runs "$RUNS" -i --export-csv "$CSV" \
        -n orch "$CMD_ORCH" -n grep-E "$CMD_GREP" >&2
    # CSV columns: command,mean,stddev,... ; `command` is the -n name.
    while IFS=, read -r name mean _; do MEAN[$name]=$mean; done < <(tail -n +2 "$CSV")
else
    time_cmd() { # prints mean seconds over $RUNS runs
        local total=0 t0 t1
        for ((r = 0; r < RUNS; r++)); do
            t0=$(date +%s.%N)
            bash -c "$1" || true
            t1=$(date +%s.%N)
            total=$(awk -v a="$total" -v b="$t0" -v c="$t1" 'BEGIN { printf "%.6f", a + c - b }')
        done
        awk -v t="$total" -v n="$RUNS" 'BEGIN { printf "%.4f", t / n }'
    }
    MEAN[orch]=$(time_cmd "$CMD_ORCH")
    MEAN[grep-E]=$(time_cmd "$CMD_GREP")
fi

printf '\n%-8s %12s %10s\n' tool mean_s GB/s
for name in orch grep-E; do
    awk -v n="$name" -v t="${MEAN[$name]}" -v b="$SIZE_BYTES" \
        'BEGIN { printf "%-8s %12.3f %10.2f\n", n, t, b / t / 1e9 }'
done
awk -v a="${MEAN[orch]}" -v b="${MEAN[grep-E]}" 'BEGIN { printf "orch / grep-E time ratio: %.2f\n", a / b }'
