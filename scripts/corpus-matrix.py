#!/usr/bin/env python3
"""Print the classifier corpus's coverage matrix (stack x label) as a markdown table.

    scripts/corpus-matrix.py > /tmp/matrix.md

Reads every split's sources.tsv under crates/orch-classify/tests/corpus/; the stack is the
`framework` column, folded into a family by the first name in STACKS it contains.
"""
import collections
import csv
import os

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "crates", "orch-classify", "tests", "corpus")
SPLITS = [".", "holdout", "holdout2", "holdout3", "holdout4", "holdout5", "holdout6", "holdout7", "holdout8", "holdout9", "holdout10", "holdout11", "holdout12", "holdout13", "holdout14", "holdout15", "holdout16", "holdout17", "holdout18", "holdout19", "holdout20", "holdout21", "holdout22", "holdout23", "holdout24", "holdout25", "holdout26", "holdout27"]
CLASSES = ["gpu_oom", "kv_cache", "host_oom", "timeout", "preempted", "node_fail", "nccl_timeout", "error", "none"]
# (substring of the framework column, family), first match wins.
STACKS = [
    ("verl", "verl"), ("vllm", "vLLM"), ("sglang", "SGLang"), ("slurm", "Slurm"), ("ray", "Ray"),
    ("deepspeed-mii", "DeepSpeed-MII"), ("deepspeed", "DeepSpeed"), ("torch-xla", "JAX/XLA"),
    ("torchxla", "JAX/XLA"), ("torchtune", "torchtune"), ("torchtitan", "torchtitan"),
    ("torchrec", "torchrec"), ("torch", "torch"), ("fsdp", "torch"), ("tensorflow", "TensorFlow"),
    ("tf-", "TensorFlow"), ("jax", "JAX/XLA"), ("xla", "JAX/XLA"), ("maxtext", "JAX/XLA"),
    ("t5x", "JAX/XLA"), ("levanter", "JAX/XLA"), ("tpu", "JAX/XLA"), ("keras", "Keras"),
    ("trl", "TRL"), ("accelerate", "accelerate"), ("llamafactory", "LLaMA-Factory"),
    ("llama-factory", "LLaMA-Factory"), ("openrlhf", "OpenRLHF"), ("rl-swarm", "rl-swarm"),
    ("easyr1", "EasyR1"), ("areal", "AReaL"), ("nemo", "NeMo/NeMo-RL"), ("megatron", "Megatron"),
    ("lightning", "Lightning"), ("colossal", "ColossalAI"), ("axolotl", "axolotl"),
    ("unsloth", "Unsloth"), ("slime", "slime"), ("skyrl", "SkyRL"), ("roll", "ROLL"),
    ("text-generation-webui", "text-generation-webui"), ("tgi", "TGI"), ("llama.cpp", "llama.cpp"),
    ("llamacpp", "llama.cpp"), ("lmdeploy", "LMDeploy"), ("tensorrt", "TensorRT-LLM"),
    ("triton", "Triton"), ("ollama", "Ollama"), ("xinference", "Xinference"), ("tabby", "TabbyAPI"),
    ("mlc", "MLC-LLM"), ("localai", "LocalAI"), ("mistral", "mistral.rs"), ("lightllm", "LightLLM"),
    ("aphrodite", "Aphrodite"), ("fastchat", "FastChat"), ("kernel", "Linux kernel"),
    ("linux", "Linux kernel"), ("nvidia", "NVIDIA driver"), ("nvrm", "NVIDIA driver"),
    ("k8s", "Kubernetes"), ("kubernetes", "Kubernetes"), ("kubeflow", "Kubernetes"),
    ("mpijob", "Kubernetes"), ("skypilot", "SkyPilot"), ("dstack", "dstack"), ("pbs", "PBS/Torque"),
    ("torque", "PBS/Torque"), ("moab", "PBS/Torque"), ("lsf", "LSF"), ("htcondor", "HTCondor"),
    ("sge", "Grid Engine"), ("flux", "Flux"), ("azure", "Azure ML"), ("sagemaker", "SageMaker"),
    ("colab", "Colab"), ("determined", "Determined"), ("flyte", "Flyte"), ("nextflow", "Nextflow"),
    ("runpod", "RunPod"), ("horovod", "Horovod"), ("rocm", "ROCm"), ("hip", "ROCm"),
    ("iree", "ROCm"), ("habana", "Gaudi"), ("gaudi", "Gaudi"), ("xpu", "Intel XPU"),
    ("ipex", "Intel XPU"), ("mps", "Apple MPS"), ("ascend", "Ascend NPU"), ("npu", "Ascend NPU"),
    ("nccl", "NCCL"), ("cudnn", "cuDNN/cuBLAS"), ("bitsandbytes", "bitsandbytes"),
    ("paddle", "PaddlePaddle"), ("mindspore", "MindSpore"), ("composer", "Composer"),
    ("llm-foundry", "Composer"), ("mosaic", "Composer"), ("fairseq", "fairseq"),
    ("gpt-neox", "GPT-NeoX"), ("litgpt", "LitGPT"), ("ludwig", "Ludwig"), ("nanotron", "Nanotron"),
    ("oneflow", "OneFlow"), ("docker", "Docker"), ("hydra", "Hydra"), ("comfy", "ComfyUI"),
    ("python", "Python"), ("caffe", "Caffe"), ("transformers", "transformers"),
    ("taskcluster", "GCP"), ("gcp", "GCP"), ("framework", "verl"),
]


def family(framework):
    f = framework.lower().strip()
    return next((v for k, v in STACKS if k in f), framework.strip())


def main():
    matrix = collections.defaultdict(collections.Counter)
    for split in SPLITS:
        with open(os.path.join(ROOT, split, "sources.tsv"), newline="") as fh:
            for row in list(csv.reader(fh, delimiter="\t"))[1:]:
                if len(row) == 5:
                    matrix[family(row[2])][row[3]] += 1
    print("| stack | " + " | ".join(CLASSES) + " | all |")
    print("|---|" + "---|" * len(CLASSES) + "---|")
    total = collections.Counter()
    for stack in sorted(matrix, key=lambda s: (-sum(matrix[s].values()), s.lower())):
        c = matrix[stack]
        total.update(c)
        print(f"| {stack} | " + " | ".join(str(c[k]) if c[k] else "" for k in CLASSES) + f" | {sum(c.values())} |")
    print("| **all** | " + " | ".join(str(total[k]) for k in CLASSES) + f" | {sum(total.values())} |")
    print(f"\n{len(matrix)} stacks, {sum(total.values())} excerpts.")


if __name__ == "__main__":
    main()
