//! The classifier on real logs: every excerpt in `tests/corpus/` (and, scored apart, in
//! `tests/corpus/holdout/`) is a verbatim piece of a log someone pasted into a public issue
//! of a framework orch runs, listed with its URL, its label and why in the directory's
//! `sources.tsv`. Each is classified the way `orch classify` does it ([`classify_path`]) and
//! scored twice: the exact class, and the *action* it leads the planner to
//! (`orch-core/src/planner/mod.rs::next`):
//!
//! * **recover** — `gpu_oom`, `kv_cache`, `host_oom`: the memory ladder answers them;
//! * **resubmit** — `timeout`, `preempted`, `node_fail`, `hang`: the same configuration again
//!   from the last checkpoint; `nccl_timeout`: no default ladder step answers it, so it is
//!   retried once from the last checkpoint;
//! * **give up** — `error`, and `none` (a failed job whose log names nothing is `error`,
//!   `orch-core/src/outcome.rs::decide`).
//!
//! The test fails on any *memory false alarm* (a case labelled with a non-memory class
//! classified as a memory class: orch would shrink a job for nothing) that its split does not
//! name as known, or when a split acts correctly on fewer of its cases than its floor. Each
//! holdout was written in before the classifier was tuned for it and scored first as it stood
//! (its *first-sight* score, in the floor's doc and in `tests/corpus/README.md`). Each split is
//! scored with the strict reading (the log alone) and with the scheduler's (a case labelled
//! with a failure is a job that failed: `Verdict::given_failure`), which must act at least as
//! well.
//!
//! Scoring lives in `orch_classify::corpus`; `cargo run -p orch-classify --example score --
//! DIR...` prints the same tables.
//!
//! To add a case: save the excerpt verbatim (strip only GitHub's quote markers and markdown
//! fences) as `<framework>-<short-shape>.log` and add its row to `sources.tsv`.

use std::path::{Path, PathBuf};

use orch_classify::corpus::{Reading, score_as};

/// Share of the tuned split that must be acted on correctly.
const TUNED_FLOOR: f64 = 0.95;
/// Share of the holdout that must be acted on correctly. It was 28/34 before issue 20's
/// changes and 32/34 (94.1 %) when first scored after tuning; a generic fix for one of its two
/// misses (a glog CUDA check failed with error 2, Caffe's `Check failed: error == cudaSuccess
/// (2 vs. 0)  out of memory`) made it 33/34 (97.1 %), so it no longer measures unseen shapes
/// alone. Its last miss, an interactive shell's bare `Killed`, was read as weak SIGKILL evidence
/// after batch K (every real log in the corpus that ends in it is the host OOM killer's): 34/34.
const HOLDOUT_FLOOR: f64 = 1.0;

/// Share of the second holdout that must be acted on correctly. Its 27 excerpts were collected
/// for issue 20's last round and scored before any change made for them: 21/27 (77.8 %), 0
/// memory false alarms. After the changes that generalised (a kernel's device-side assert line,
/// C++ `CUDA Error:`, NCCL's non-memory `Cuda failure`, `std::bad_alloc`, c10's older CPU
/// allocator message, the pre-2.2 raylet kill line, NCCL's heartbeat monitor, a cause's
/// exception repr mid-line, a traceback without frames): 26/27 (96.3 %); with batch X's c10
/// trailer `Exception raised from checkTimeout at ...` (the terminal that wrapped the watchdog's
/// timeout mid-word still shows it), 27/27.
const HOLDOUT2_FLOOR: f64 = 1.0;

/// Share of the third holdout that must be acted on correctly. Its 22 excerpts (issue 21's
/// last session: verl, OpenRLHF, AReaL, RLinf, EasyR1, rl-swarm, vLLM, SGLang, Ray, Slurm, a
/// cloud worker, the NVIDIA driver) were collected by someone who had not read the classifier,
/// and scored before any change made for them: 20/22 (90.9 %), exact 19/22, 0 memory false
/// alarms. The misses: the driver's `Xid 79, GPU has fallen off the bus` (no node-failure
/// rule outside Slurm) and GCP's `termination is imminent` (no preemption rule outside
/// Slurm); and, with the right action, a paste that cut `RayTaskError(ValueErr`. After the
/// three generic rules: 22/22.
const HOLDOUT3_FLOOR: f64 = 0.95;

/// Share of the fourth holdout that must be acted on correctly. Its 174 excerpts (issue 40: four
/// batches, collected by helpers who had not read the classifier, from trainers, inference
/// engines and Ray, schedulers and platforms, and accelerators other than CUDA) scored first
/// sight 101/174 (58.0 %), device-memory recall 30/55, host 9/37, 0 false alarms. After the
/// normaliser, the runtimes' vocabulary and the failed-job reading: 147/174 (84.5 %); after a
/// review's false-alarm fixes (no host prefix but before a report, no advice, no `key: value`
/// line reports): 144/174 (82.8 %); after batch K's bare `Killed`: 147/174 (84.5 %).
const HOLDOUT4_FLOOR: f64 = 0.84;

/// Share of the fifth holdout that must be acted on correctly. Its 89 excerpts (three more
/// batches, from stacks none of the earlier ones covered: serving engines such as TensorRT-LLM,
/// Ollama and TabbyAPI, trainers such as Composer, MaxText, PaddlePaddle and MindSpore, and
/// platforms such as Azure ML, SGE, Horovod and Determined) were scored first sight after the
/// fourth holdout's changes: batches F and G 28/54 (51.9 %), batch E 27/35 (77.1 %). Most misses
/// left are labels that rest on the thread rather than the excerpt (a bare `Killed`, an exit
/// code alone). Now 59/89 (66.3 %); after batch K's bare `Killed`: 64/89 (71.9 %).
const HOLDOUT5_FLOOR: f64 = 0.71;

/// Share of the sixth holdout that must be acted on correctly. Its 29 excerpts (batch H, from
/// 26 stacks none of the earlier batches covered: ms-swift, MLX, AReaL, LMDeploy, PyTorch/XLA on
/// TPU, Chainer, SageMaker, kohya, ExLlamaV2, Kubeflow's training operator, Composer, ...)
/// scored first sight 22/29 (75.9 %), device recall 7/11, host 3/5, 0 false alarms (the
/// classifier before issue 40: 18/29). After vocabulary read from the runtimes' sources
/// (CPython's `died with <Signals.SIGKILL: 9>`, CUDA's NVLink error, llama.cpp's and ExLlamaV2's
/// KV allocation), torch's OOM class reporting at a line start, `Exception in ...:` reporting
/// and a quote followed by a space never opening: 27/29.
const HOLDOUT6_FLOOR: f64 = 0.93;

/// Share of the seventh holdout that must be acted on correctly. Its 30 excerpts (batch I, from
/// 28 stacks the corpus did not cover: Isaac Gym, detectron2, AlphaFold, nnU-Net, ONNX Runtime,
/// wav2letter, DeepSpeech, FunASR, tinygrad, mistral.rs, Tenstorrent, XTuner, Kueue, Julia's
/// CUDA.jl, ...) scored first sight 18/30 (60.0 %), device recall 3/9, host 3/8, 0 false alarms
/// (after batch H's changes; 16/30 before issue 40). After a device allocator naming itself,
/// `std::bad_alloc` opening a line, an exception's repr reporting mid-line and `**` emphasis
/// opening a report: 23/30 (Ray's `(1) The process is killed by SIGKILL by OOM killer` guess
/// was tried and dropped: Ray prints it after every abrupt worker death, NCCL timeouts and
/// illegal memory accesses included); after batch K's bare `Killed`: 24/30.
const HOLDOUT7_FLOOR: f64 = 0.80;
/// Batch J (issue 40): 30 excerpts from stacks outside ML training frameworks that share their
/// machines and failures — RAPIDS (cuDF, RMM, dask-cuda), Dask, Spark on YARN, XGBoost,
/// LightGBM, CTranslate2 (faster-whisper), OpenACC and MPI codes (MFC, SPECFEM3D, PIConGPU),
/// vllm.rs, Flux, RunsOn, gpud — collected by a helper who had not read the classifier. First
/// sight (before any change for it): 15/30 (50.0 %), device recall 2/11, host 3/7, no false
/// alarm. After the runtimes' own error names decided anywhere on a reporting line
/// (`device-oom-error-name`), reporters wrapping the runtime's `out of memory`, RMM, the JVM's
/// OutOfMemoryError, YARN's and Dask's memory kills, JSON log records and source tags peeled,
/// Flux's timeout exception, a spot interruption notice and a KV-cache allocator's refusal:
/// 27/30.
const HOLDOUT8_FLOOR: f64 = 0.86;
/// Batch K (issue 40): 30 excerpts from training and inference stacks still uncovered — AWS
/// Neuron, Liger-Kernel, ESPnet2, icefall, OpenFold, DeePMD-kit, CogVideoX, Wan2.1 and
/// FramePack under WSL2, LightLLM, Xinference, LeRobot, MMDetection 3, Intel's XPU Triton,
/// milabench, gpu-burn — collected by a helper who had not read the classifier, scored after
/// batch J's changes and before any change for it: 21/30 (70.0 %), device recall 8/13, host
/// 3/7, no false alarm. After the Neuron runtime's device allocator, TensorFlow's BFC
/// allocator giving up and its `ResourceExhaustedError`, `torch.multiprocessing`'s SIGKILL,
/// an interactive shell's bare `Killed` and vLLM's KV-cache sentence anywhere on a reporting
/// line: 29/30.
const HOLDOUT9_FLOOR: f64 = 1.0;
/// Batch L (issue 40): 25 excerpts from LLM and VLM fine-tuning repositories built on the
/// covered trainers (VisCPM, MiniCPM-V, Qwen-VL fine-tuning, LLaVA-NeXT, llama-recipes,
/// Pai-Megatron-Patch, self-rag, nanoGPT, llm.c, llama2.c, ScaleLLM, Bonito) and a cluster's
/// Singularity wrapper, collected by a helper who had not read the classifier, scored after
/// batch K's changes and before any change for it: 22/25 (88.0 %), device recall 8/9, host
/// 6/6, no false alarm. After nvidia-smi's `Unable to determine the device handle for GPU ...:
/// Unknown Error` and torch's OOM class padded before its colon: 25/25.
const HOLDOUT10_FLOOR: f64 = 0.96;
/// Batch M (issue 40): 30 excerpts of what earlier batches lacked — time limits, preemption,
/// lost nodes and collective timeouts printed by submitit, Modal, Metaflow, the kubelet,
/// torchelastic, NCCL over InfiniBand, the GPU Operator, Horovod, Lightning, prime-rl,
/// ArcticTraining, Cromwell — and RL repositories' OOMs, collected by a helper who had not
/// read the classifier, scored after batch L's changes and before any change for it: 20/30
/// (66.7 %), memory recall 4/5, no false alarm (one in the failed-job reading: srun's `task 1:
/// Killed` of a step cancelled for its wait time, gone once a lead signature reads only where a
/// report starts there too). After torch's collective-timeout dump
/// signal, torchelastic's `RendezvousTimeoutError` (and a JSON error record's message field
/// peeled), submitit's time-limit and preemption words, Modal's function timeout, the
/// kubelet's critical-pod preemption and an InfiniBand adapter's catastrophic error: 27/30.
const HOLDOUT11_FLOOR: f64 = 0.86;
/// Batch O (issue 40): 20 excerpts of host memory and scheduler endings as runtimes other than
/// Python's print them — Go (Windows' commit limit), Node.js/V8, .NET (ML.NET), Rust, pyarrow,
/// Julia's CuArrays and MXNet.jl, AWS Lambda, GitLab CI, Cobalt, Cromwell on GCP Batch, dstack,
/// macOS — collected by a helper who had not read the classifier, scored after batch N's
/// changes and before any change for it: 6/20 (30.0 %), device recall 1/3, host 1/7, one false
/// alarm (Rust's `memory allocation of 18446744073709551615 bytes failed`, an overflow). After
/// those runtimes' own words (Go's `fatal error: out of memory` and `VirtualAlloc ...
/// errno=1455`, V8's `JavaScript heap out of memory`, `System.OutOfMemoryException`, Arrow's
/// `ArrowMemoryError`, CUDA.jl's `Out of GPU memory`, Lambda's and gitlab-runner's limits, a
/// spot VM preempted during run time, dstack's `INTERRUPTED_BY_NO_CAPACITY`), `exit code -9`,
/// an absurd allocation size as a bug, and a message later in an error report (glog's `Check
/// failed: ... CUDA: out of memory`): 20/20.
const HOLDOUT12_FLOOR: f64 = 0.95;
/// Batch P (issue 40): 19 excerpts, a mixed batch from repositories not yet used (TensorRT's
/// trtexec, KoboldCpp, ik_llama.cpp, LoRAX, Spark NLP, TransmogrifAI, SentencePiece, D-FINE,
/// InternLM, Keras, Flax on TPU, an Akash GPU provider, …), collected by a helper who had not
/// read the classifier, scored after batch O's changes and before any change for it: 15/19
/// (78.9 %), device recall 5/9, host 5/5 (O's and J's host vocabulary carried), no false alarm.
/// After TensorRT's `Error Code 1: Cuda Runtime (out of memory)` behind its logger's
/// `[11/22/2024-13:40:47] [E]`, llama.cpp's server `ERR` level and its `KV cache is full`, and a
/// report glued to a progress line (`... tokens)CUDA error: out of memory`): 18/19.
const HOLDOUT13_FLOOR: f64 = 0.94;

/// Batch Q (issue 40): 25 excerpts of logs in the formats they reach users through (Replicate
/// Cog's JSON, Triton's glog, TGI's shard manager, TorchServe, KServe's kubelet events,
/// Enroot/Pyxis, Singularity, journald and syslog, Ollama's logfmt, ECS task JSON, an Argo CSV
/// export), collected by a helper who had not read the classifier, scored after batch P's
/// changes and before any change for it: 20/25 (80.0 %), device recall 3/4, host 1/4, no false
/// alarm. After systemd's `A process of this unit has been killed by the OOM killer`, Go's
/// `signal: killed` behind a logfmt record's `error="`, and Ray's old `RayOutOfMemoryError`:
/// 23/25 (Triton's ORT `BFCArena` failure, device or host unsaid, and a Karpenter deletion
/// only the thread calls a preemption are left).
const HOLDOUT14_FLOOR: f64 = 0.92;

/// Batch R (issue 40): 27 excerpts of how jobs end on schedulers and hardware (LSF mail,
/// Torque/Moab, SGE qacct, HTCondor via CRAB, CMS WMAgent, Kubernetes evictions, Kubeflow,
/// Ascend HCCL, JAX's coordination service, TF MultiWorkerMirrored, MindSpore, PaddlePaddle),
/// collected by a helper who had not read the classifier, scored after batch Q arrived and
/// before any change for either: 14/27 (51.9 %), device recall 2/3, host 3/6, one false alarm.
/// After the other runtimes' collective timeouts (TF's `StartAbort DEADLINE_EXCEEDED`, the
/// coordination service's `heartbeat timeout`, CANN's stream-sync and task timeouts), CRAB's
/// wall-clock limit, WMCore's `Job has exceeded maxPSS`, pinned host memory, TF 1.x's BFC
/// `Ran out of memory ... See logs for memory state`, the kubelet's eviction for a node
/// condition, and a pdsh host prefix before an indented line: 23/27.
const HOLDOUT15_FLOOR: f64 = 0.85;

/// Batches S and T (issue 40), collected side by side after Q's and R's changes by helpers who
/// had not read the classifier and scored before any change for them. S: 6 excerpts from RL
/// repositories built on the big trainers (NeMo-RL, slime, RLinf, SimpleVLA-RL, unsloth GRPO;
/// the collector found few whole error lines), 5/6. T: 25 from the libraries and runtimes
/// under and beside training (flash-attention, xformers, TransformerEngine, Inductor and Triton
/// autotuning, XLA on TPU, llm-compressor, bitsandbytes, NeMo Curator, kohya, OneTrainer, ROCm,
/// Gaudi, Intel XPU, MLX, AWS Neuron), 19/25 (76.0 %), device recall 11/16, host 0/1, no false
/// alarm. After Gaudi's older `MODULE:SYNHELPER` allocation failure, Neuron's `Failed to alloc
/// DEVICE memory`, Intel's XPU and Level Zero's out-of-device-memory words, XLA's TPU
/// allocation report, and Python's bare `MemoryError` line: 29/31 (a KV-cache failure only the
/// thread names and Ray's generic actor death are left).
const HOLDOUT16_FLOOR: f64 = 0.93;

/// Batches U and V (issue 40), collected side by side after S's and T's changes by helpers
/// who had not read the classifier and scored before any change for them. U: 25 excerpts, a
/// sample of the world rather than a theme (recent issues from 23 repositories: instructlab,
/// DiffSynth, diffusion-pipe, tinygrad, nccl, MiniCPM-V, InternVL, OneTrainer, unsloth, openpi,
/// dreamerv3, trl …), 19/25 (76.0 %), device recall 3/6, host 3/5. V: 25 from Chinese-language
/// threads (PaddlePaddle, MindSpore, vllm-ascend, torch_npu, ms-swift, LMDeploy, XTuner,
/// FunASR), 18/25 (72.0 %), device 7/11, host 1/4 (a bare `MemoryError:` that PaddlePaddle
/// raises for its device's exhaustion was read as the host's, a regression of T's change). No
/// false alarm in either. After the Chinese locale's `已杀死`, PaddlePaddle's host allocator
/// and DataLoader wording, MindSpore's `Memory isn't enough`, torch's TCPStore and stuck
/// watchdog, the bare `MemoryError` made weak (and one opening a line with its message), and
/// the schedulers' own vocabulary (80 rows read from Slurm, OpenPBS, Torque, Grid Engine,
/// HTCondor, Flux, Kubernetes, Kueue, the clouds and DCGM sources): 43/50 (what is left rests
/// on the thread: excerpts cut before the failing line, a recovered OOM followed by a stall, a
/// bare progress bar); with the shell's `Killed` glued to a progress bar's end (a later
/// rule), 44/50.
const HOLDOUT17_FLOOR: f64 = 0.88;

/// Batch W (issue 40): 13 excerpts from the tool's core users (RL post-training and SFT on
/// clusters: verl and its forks on Ray, slime, miles, OpenRLHF multi-node, lmm-r1, TRL's
/// GRPOTrainer, LLaMA-Factory), collected after U's and V's changes by a helper who had not
/// read the classifier (few whole error lines came back), scored before any change for it:
/// 12/13 (92.3 %), device recall 4/4, no false alarm; the miss is Ray's generic actor death,
/// which only the thread calls a host OOM. Nothing was changed for it.
const HOLDOUT18_FLOOR: f64 = 0.92;

/// Batch X (issue 40): how ML training jobs end when it is not a plain Python error (litgpt,
/// Lightning, picotron, TF TPUEstimator, submitit, DeepSpeed, nnU-Net, MMDetection, torchrun,
/// YOLOv5 on SageMaker …), collected after W by a helper who had not read the classifier (15
/// came back, none a time limit, preemption or lost node; one whose nvidia-smi borders the
/// collector retyped is left out: 14 kept), scored before any change: 10/14 (71.4 %), host
/// recall 0/1. After torch's own words — the c10 trailer `Exception raised from checkTimeout at
/// ...ProcessGroupNCCL.cpp` of a watchdog timeout whose message was cut, and a DataLoader
/// worker `killed by signal: Bus error` (its shared memory ran out): 12/14 (the rest rest on the
/// thread: a launcher's teardown, a rendezvous socket that another batch labels error).
const HOLDOUT19_FLOOR: f64 = 0.85;

/// Batch Y (issue 40): a second sample of the world (14 recent issues from 14 repositories:
/// JanusVLN, FlagEmbedding, VLM-R1, ms-swift, Ascend/pytorch, verl, gsplat, VLMEvalKit, lerobot,
/// FastVideo, a kernel log of Xids …), collected after X's changes by a helper who had not read
/// the classifier, scored before any change: 13/14 (92.9 %), no false alarm; the miss is Xid 45
/// lines "caused by previous Xid 145/149" that the collector read as a lost GPU. Nothing was
/// changed for it.
const HOLDOUT20_FLOOR: f64 = 0.92;

/// Batch Z (issue 40): host memory during training and data preparation (15 from 14
/// repositories not used before: caffe, ssd-tensorflow, unsloth-zoo, ultralytics, DMD2,
/// Step-Video, FastChat, DiffuSeq, open-instruct …; the collector copied the search tool's text
/// by hand), collected after Y by a helper who had not read the classifier, scored before any
/// change: 11/15 (73.3 %), host recall 4/7, one false alarm (torchelastic's `exitcode: -9`,
/// which the thread does not blame on RAM). After Arrow's `ArrowMemoryError: malloc of size N
/// failed` anywhere on a reporting line (its traceback's header was cut) and torch's worker
/// `Unexpected bus error ... insufficient shared memory (shm)`: 13/15 (a `Killed` glued to the
/// end of a progress bar is left).
const HOLDOUT21_FLOOR: f64 = 0.86;

/// Batches AA–AD (issue 40), four themes collected together by helpers who had not read the
/// classifier, scored before any change (63 from 58 repositories): AA, the device runtimes
/// beside torch (CuPy, Numba, MXNet, Theano, CUDA.jl, Taichi, DirectML, OpenVINO, TensorRT,
/// llama.cpp's Vulkan, ncnn, Metal, burn on wgpu, tch, R torch, ZLUDA): 11/22 (50.0 %), device
/// recall 6/16; AB, job runners and platforms (Kubeflow, OpenPAI, FfDL, Determined, Ray
/// Train/Tune, W&B sweeps, RunPod): 10/13, one false alarm (a teardown's exit 137); AC,
/// post-training repositories not yet covered (open-r1, verifiers, LMFlow, axolotl GRPO,
/// simple_GRPO, align-anything, EasyDeL, open-instruct on Beaker): 10/11; AD, host memory's
/// endings (Slurm, Windows' paging file, DataLoader workers, numpy, tcmalloc, pyarrow): 14/17.
/// Together 45/63 (71.4 %), device 9/19, host 12/17. After the allocators' own words read from
/// their sources, four normalisations (a private exception class, ComfyUI's banner, dmlc's
/// file:line, a C++ function's chain after a logger's tag) and an exit 137 after another
/// failure read as its teardown: 58/63 (92.1 %), no false alarm.
const HOLDOUT22_FLOOR: f64 = 0.92;

/// Batches AE–AG (issue 40), collected after AA–AD's changes by helpers who had not read the
/// classifier, scored before any change (46 from 41 repositories): AE, accelerators other than
/// NVIDIA's (Ascend CANN and MindIE, AWS Neuron, Hygon DCU, Cambricon MLU, Moore Threads MUSA,
/// Graphcore IPU, TPU pods, Gaudi, MI300X, Kunlun XPU, Tenstorrent): 15/20, device 4/8; AF, a
/// third random sample of 2025–26 issues: 11/12; AG, vision and video training (OpenMMLab,
/// MONAI, PaddleDetection, DeepLab, YOLOX, MemSAM, DiffSynth's Wan): 13/14. Together 39/46
/// (84.8 %), device recall 10/16, host 2/2, no false alarm. After the runtimes' own words
/// (Ascend's EL0004, Neuron's `nrt_tensor_allocate status=4`, Poplar's allocation errors,
/// MindIE's prefill budget, libtorch's `c10::OutOfMemoryError`), C++'s `what():  ` peeled and
/// loggers' bracketed fields peeled: 44/46 (95.7 %).
const HOLDOUT23_FLOOR: f64 = 0.95;

/// Batches AH–AJ (issue 40), collected after AE–AG's changes by helpers who had not read the
/// classifier, scored before any change (48 from 45 repositories): AH, how cluster schedulers
/// end jobs (Slurm and slurmctld, NERSC, LSF, Flux, SkyPilot, Volcano, OpenPAI): 12/15; AI,
/// Chinese-language threads (XTuner, ChatGLM3, ColossalAI, PaddleNLP, Qwen, CodeGeeX, Yi, MOSS,
/// Firefly, BELLE, BMTrain, LLaMA-Factory on Ascend …): 18/20; AJ, rollout engines inside RL
/// jobs (ms-swift, slime, OpenRLHF, TRL, EasyR1, PRIME on vLLM V1; SGLang-JAX, TensorRT-LLM,
/// kvcached, Dynamo): 10/13, one false alarm (a torch OOM with most of the card free, named in
/// KNOWN_FALSE_ALARMS). Together 40/48 (83.3 %), device 7/9, host 5/6. After TensorRT-LLM's
/// KV-cache component, HCCL's EI0006 socket timeout and the driver's `RmInitAdapter failed!`
/// (two older holdouts' misses of the same shapes with them): 43/48 (89.6 %).
const HOLDOUT24_FLOOR: f64 = 0.89;

/// Batches AK–AM (issue 40), collected after AH–AJ's changes by helpers who had not read the
/// classifier, scored before any change (48 from 46 repositories): AK, training from notebooks
/// and data platforms (Databricks, SageMaker, Colab, Kaggle, Vertex AI, Azure ML, Jupyter):
/// 13/18, host recall 0/3; AL, speech and audio training (F5-TTS, Coqui, RVC, Tacotron,
/// seamless, CosyVoice, StyleTTS2, VITS, GPT-SoVITS, wav2vec2 …): 14/15; AM, robotics and
/// scientific ML (Isaac Lab, legged_gym, mujoco_warp, ManiSkill, OpenVLA-OFT, Boltz,
/// RFdiffusion, MACE, DeePMD, DeepXDE, GraphCast): 10/15, device 5/9. Together 37/48 (77.1 %),
/// device 16/23, host 1/5, no false alarm. After Warp's, TF 2's and Spark RAPIDS' words,
/// Omniverse's Vulkan result and `Out of GPU memory allocating`, the BFC allocator's dump, and
/// Jupyter's restarted kernel as a weak host OOM unless the log names a crash of the process: 43/48
/// (89.6 %), and three older holdouts' Colab logs with them.
const HOLDOUT25_FLOOR: f64 = 0.89;

/// Batches AN–AO (issue 40), collected after AK–AM's changes by helpers who had not read the
/// classifier, scored before any change (35 from 33 repositories): AN, a fourth random sample
/// of 2024–26 issues: 11/13; AO, multi-node distributed training (NCCL over IB and EFA, Gloo,
/// torchrun's rendezvous, DeepSpeed's hostfile, Intel MPI, Open MPI, Horovod, Ray Train, t5x):
/// 20/22. Together 31/35 (88.6 %), no false alarm. After Ray's `The actor is dead because its
/// node has died` and Open MPI's `ORTE has lost communication with its daemon` (node losses,
/// from their sources; an older holdout's MPIJob with them): 33/35 (94.3 %).
const HOLDOUT26_FLOOR: f64 = 0.94;

/// Batches AP–AQ (issue 40), collected after AN–AO's changes by helpers who had not read the
/// classifier, scored before any change (36 from 33 repositories): AP, a fifth random sample
/// searched by the symptoms a user sees: 14/16; AQ, cloud GPU machines as they and their
/// managers report a job's end (RunPod, EC2 and ParallelCluster spot, EFA, dstack, GKE's
/// driver installer and device plugin, AKS, Azure ND, Cloud TPU, HF Jobs, OpenShift's GPU
/// operator): 14/20, its misses node losses and spot reclaims only the threads name. Together
/// 28/36 (77.8 %), no false alarm. Nothing was changed for them: the next session's first
/// holdout of the classifier as this one left it.
const HOLDOUT27_FLOOR: f64 = 0.77;

/// False alarms a split is known to raise, each a judgement call the excerpt alone cannot
/// settle: Azure ML's NCCL `WARN Cuda failure 'out of memory'` while training carried on
/// (labelled none), Determined's exit 137 after the platform killed a container (labelled
/// error), `kubectl get pods` listing pods `OOMKilled` whose Jobs all completed (labelled none:
/// the containers were OOM-killed and restarted; a failed job showing that table was one).
const KNOWN_FALSE_ALARMS: &[&str] = &[
    "azureml-nccl-rem-allocator-oom-warn-training-continues.log",
    "k8s-job-pods-oomkilled-but-succeeded.log",
    // torchelastic's `failed (exitcode: -9)`: a SIGKILL, a weak host OOM by design (the OOM
    // killer's is the common one); the collector labelled it error, the thread naming no cause.
    "dmd2-sdxl-fsdp-accelerate-exitcode-9.log",
    // torch's OOM for 20 MiB with 66.43 of 79.11 GiB free (vLLM's sleep-mode allocator, fixed
    // upstream): no full card, so the collector labelled it error; two other logs of the same
    // shape (a HIP OOM with 203 GiB free, FastChat's with 7 of 16 GiB free) are labelled gpu_oom
    // by theirs, so orch keeps reading the words (a rule for "most of the card free" was tried
    // and dropped: it turned those two).
    "msswift-megatron-grpo-colocate-oom-66gib-free-cumem-bug.log",
];

fn corpus_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/corpus")
}

fn check(dir: &Path, name: &str, floor: f64) {
    let strict = score_as(dir, name, Reading::Strict).unwrap_or_else(|e| panic!("{e}"));
    let failed = score_as(
        dir,
        &format!("{name}, scheduler's reading"),
        Reading::Scheduler,
    )
    .unwrap_or_else(|e| panic!("{e}"));
    for s in [&strict, &failed] {
        eprintln!("{}", s.report());
        let unknown: Vec<String> = s
            .false_alarms()
            .into_iter()
            .filter(|o| !KNOWN_FALSE_ALARMS.contains(&o.case.file.as_str()))
            .map(|o| format!("{} ({})", o.case.file, o.case.url))
            .collect();
        assert!(
            unknown.is_empty(),
            "{}: memory false alarms: {unknown:?}",
            s.name
        );
        assert!(s.exact().n <= s.acted().n);
    }
    assert!(
        strict.acted().ratio() >= floor,
        "{name}: acted on correctly {} < {:.0} %",
        strict.acted(),
        floor * 100.0
    );
    // A known false alarm of the failed-job reading (a judgement call, listed above) is the
    // one case it may lose to the log alone.
    let known = failed
        .false_alarms()
        .into_iter()
        .filter(|o| KNOWN_FALSE_ALARMS.contains(&o.case.file.as_str()))
        .count()
        .saturating_sub(
            strict
                .false_alarms()
                .into_iter()
                .filter(|o| KNOWN_FALSE_ALARMS.contains(&o.case.file.as_str()))
                .count(),
        );
    assert!(
        failed.acted().n + known >= strict.acted().n,
        "{name}: the scheduler's reading acts worse ({}) than the log alone ({})",
        failed.acted(),
        strict.acted()
    );
}

#[test]
fn tuned_split() {
    check(&corpus_dir(), "corpus (tuned)", TUNED_FLOOR);
}

#[test]
fn holdout_split() {
    check(
        &corpus_dir().join("holdout"),
        "corpus (holdout)",
        HOLDOUT_FLOOR,
    );
}

#[test]
fn second_holdout_split() {
    check(
        &corpus_dir().join("holdout2"),
        "corpus (second holdout)",
        HOLDOUT2_FLOOR,
    );
}

#[test]
fn third_holdout_split() {
    check(
        &corpus_dir().join("holdout3"),
        "corpus (third holdout)",
        HOLDOUT3_FLOOR,
    );
}

#[test]
fn fourth_holdout_split() {
    check(
        &corpus_dir().join("holdout4"),
        "corpus (fourth holdout)",
        HOLDOUT4_FLOOR,
    );
}

#[test]
fn fifth_holdout_split() {
    check(
        &corpus_dir().join("holdout5"),
        "corpus (fifth holdout)",
        HOLDOUT5_FLOOR,
    );
}

#[test]
fn sixth_holdout_split() {
    check(
        &corpus_dir().join("holdout6"),
        "corpus (sixth holdout)",
        HOLDOUT6_FLOOR,
    );
}

#[test]
fn seventh_holdout_split() {
    check(
        &corpus_dir().join("holdout7"),
        "corpus (seventh holdout)",
        HOLDOUT7_FLOOR,
    );
}

#[test]
fn eighth_holdout_split() {
    check(
        &corpus_dir().join("holdout8"),
        "corpus (eighth holdout)",
        HOLDOUT8_FLOOR,
    );
}

#[test]
fn ninth_holdout_split() {
    check(
        &corpus_dir().join("holdout9"),
        "corpus (ninth holdout)",
        HOLDOUT9_FLOOR,
    );
}

#[test]
fn tenth_holdout_split() {
    check(
        &corpus_dir().join("holdout10"),
        "corpus (tenth holdout)",
        HOLDOUT10_FLOOR,
    );
}

#[test]
fn eleventh_holdout_split() {
    check(
        &corpus_dir().join("holdout11"),
        "corpus (eleventh holdout)",
        HOLDOUT11_FLOOR,
    );
}

#[test]
fn twelfth_holdout_split() {
    check(
        &corpus_dir().join("holdout12"),
        "corpus (twelfth holdout)",
        HOLDOUT12_FLOOR,
    );
}

#[test]
fn thirteenth_holdout_split() {
    check(
        &corpus_dir().join("holdout13"),
        "corpus (thirteenth holdout)",
        HOLDOUT13_FLOOR,
    );
}

#[test]
fn fourteenth_holdout_split() {
    check(
        &corpus_dir().join("holdout14"),
        "corpus (fourteenth holdout)",
        HOLDOUT14_FLOOR,
    );
}

#[test]
fn fifteenth_holdout_split() {
    check(
        &corpus_dir().join("holdout15"),
        "corpus (fifteenth holdout)",
        HOLDOUT15_FLOOR,
    );
}

#[test]
fn sixteenth_holdout_split() {
    check(
        &corpus_dir().join("holdout16"),
        "corpus (sixteenth holdout)",
        HOLDOUT16_FLOOR,
    );
}

#[test]
fn seventeenth_holdout_split() {
    check(
        &corpus_dir().join("holdout17"),
        "corpus (seventeenth holdout)",
        HOLDOUT17_FLOOR,
    );
}

#[test]
fn eighteenth_holdout_split() {
    check(
        &corpus_dir().join("holdout18"),
        "corpus (eighteenth holdout)",
        HOLDOUT18_FLOOR,
    );
}

#[test]
fn nineteenth_holdout_split() {
    check(
        &corpus_dir().join("holdout19"),
        "corpus (nineteenth holdout)",
        HOLDOUT19_FLOOR,
    );
}

#[test]
fn twentieth_holdout_split() {
    check(
        &corpus_dir().join("holdout20"),
        "corpus (twentieth holdout)",
        HOLDOUT20_FLOOR,
    );
}

#[test]
fn twenty_first_holdout_split() {
    check(
        &corpus_dir().join("holdout21"),
        "corpus (twenty-first holdout)",
        HOLDOUT21_FLOOR,
    );
}

#[test]
fn twenty_second_holdout_split() {
    check(
        &corpus_dir().join("holdout22"),
        "corpus (twenty-second holdout)",
        HOLDOUT22_FLOOR,
    );
}

#[test]
fn twenty_third_holdout_split() {
    check(
        &corpus_dir().join("holdout23"),
        "corpus (twenty-third holdout)",
        HOLDOUT23_FLOOR,
    );
}

#[test]
fn twenty_fourth_holdout_split() {
    check(
        &corpus_dir().join("holdout24"),
        "corpus (twenty-fourth holdout)",
        HOLDOUT24_FLOOR,
    );
}

#[test]
fn twenty_fifth_holdout_split() {
    check(
        &corpus_dir().join("holdout25"),
        "corpus (twenty-fifth holdout)",
        HOLDOUT25_FLOOR,
    );
}

#[test]
fn twenty_sixth_holdout_split() {
    check(
        &corpus_dir().join("holdout26"),
        "corpus (twenty-sixth holdout)",
        HOLDOUT26_FLOOR,
    );
}

#[test]
fn twenty_seventh_holdout_split() {
    check(
        &corpus_dir().join("holdout27"),
        "corpus (twenty-seventh holdout)",
        HOLDOUT27_FLOOR,
    );
}

/// The whole corpus: at least 400 excerpts, every row a file and a URL (checked by
/// `corpus::load`), and no two rows citing one file name across the splits.
#[test]
fn the_corpus_covers_the_world() {
    let dirs = [
        "",
        "holdout",
        "holdout2",
        "holdout3",
        "holdout4",
        "holdout5",
        "holdout6",
        "holdout7",
        "holdout8",
        "holdout9",
        "holdout10",
        "holdout11",
        "holdout12",
        "holdout13",
        "holdout14",
        "holdout15",
        "holdout16",
        "holdout17",
        "holdout18",
        "holdout19",
        "holdout20",
        "holdout21",
        "holdout22",
        "holdout23",
        "holdout24",
        "holdout25",
        "holdout26",
        "holdout27",
    ];
    let mut all: Vec<(String, String)> = Vec::new();
    for d in dirs {
        let cases =
            orch_classify::corpus::load(&corpus_dir().join(d)).unwrap_or_else(|e| panic!("{e}"));
        all.extend(cases.into_iter().map(|c| (c.file, c.framework)));
    }
    assert!(all.len() >= 400, "{} excerpts", all.len());
    let mut files: Vec<&str> = all.iter().map(|(f, _)| f.as_str()).collect();
    files.sort_unstable();
    let dup = files.windows(2).find(|w| w[0] == w[1]);
    assert!(dup.is_none(), "one file name in two splits: {dup:?}");
}
