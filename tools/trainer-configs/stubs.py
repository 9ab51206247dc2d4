"""Stand-ins for the modules the trainers' config code imports but never uses here.

verl, AReaL and genrl import torch, Ray, transformers and their like at module level, even in
the files that only define configuration dataclasses and Hydra entry points. Those packages
need a GPU stack (gigabytes) and are not what is under test: the config code is. `install()`
puts a finder first on `sys.meta_path` that answers the listed top-level names with permissive
stand-in modules: every attribute is a stand-in class (so `torch.Tensor | np.ndarray`,
subclassing, decorators and calls all work), and nothing they return is used by config parsing.
`importlib.metadata.version()` answers for them too (AReaL asks for torch's version at import).

The lists below are the names each trainer's config code imports; `used()` tells which were
actually imported, and the checker prints it, so a stand-in never hides silently.
"""

import importlib.abc
import importlib.machinery
import importlib.metadata
import sys
import types

# Imported at module level by verl 0.9.1's config path (verl/__init__.py, verl/utils,
# verl/workers/config, verl/trainer/main_ppo.py) and genrl 0.1.11's trainer module.
VERL = [
    "torch", "ray", "tensordict", "transformers", "numpy", "pandas", "datasets", "peft",
    "codetiming", "wandb", "torchdata", "pyarrow", "accelerate", "dill", "orjson",
    "PIL", "hivemind", "web3", "eth_account", "trl", "vllm", "sglang", "psutil", "requests",
    # validate_config's LoRA check imports verl/workers/rollout/vllm_rollout/utils.py, whose
    # imports reach these (verl's rollout schemas and its vLLM server's messaging).
    "pydantic", "zmq", "msgspec",
]
# Imported at module level by AReaL 1.0.4's areal/__init__.py, areal/api/cli_args.py and
# areal/infra/launcher/local.py. (lark is NOT stubbed: the allocation-mode parser is real.)
AREAL = [
    "torch", "ray", "tensordict", "transformers", "numpy", "pandas", "datasets", "peft",
    "codetiming", "wandb", "torchdata", "pyarrow", "accelerate", "dill", "orjson", "aiohttp",
    "httpx", "colorlog", "tenacity", "flask", "werkzeug", "uvloop", "psutil", "requests",
    "sglang", "vllm", "zmq", "msgspec", "pybase64", "einops", "safetensors", "megatron",
    "mbridge", "swanlab", "tensorboardX", "torch_memory_saver", "huggingface_hub", "openai",
    "math_verify", "pynvml", "setproctitle", "nvidia", "pebble", "word2number", "regex",
    "blosc", "numba", "networkx", "aiofiles", "dotenv", "json5", "prettytable", "tabulate",
    "matplotlib", "seaborn", "PIL", "zstandard", "tqdm", "rich", "pydantic", "fastapi",
    "uvicorn", "litellm", "anthropic", "agents", "claude_agent_sdk", "openhands", "langchain",
    "langchain_openai", "qwen_agent", "mistral_common", "nltk", "sentencepiece", "ninja",
    "torchvision", "torchaudio", "dateutil", "timeout_decorator", "starlette", "cloudpickle",
]
# The versions `importlib.metadata.version()` reports for stand-ins: inside what the trainers
# require (AReaL 1.0.4: torch>=2.9.1,<2.11), so version-gated imports take their current path.
VERSIONS = {"torch": "2.10.0"}
# Submodules of stand-in packages that import as missing, where the trainer's own code has a
# fallback for a stack without them: verl 0.9.1's `get_vllm_max_lora_rank`
# (verl/workers/rollout/vllm_rollout/utils.py) reads vLLM's `MaxLoRARanks` Literal, else its own
# copy of it; a stand-in would give it no values at all.
ABSENT = {"vllm.config.lora"}


class _StubMeta(type):
    def __getattr__(cls, name):
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        return _stub(f"{cls.__qualname__}.{name}")

    def __getitem__(cls, key):
        return _stub(f"{cls.__qualname__}[]")

    def __iter__(cls):
        return iter(())

    def __bool__(cls):
        return False

    # Module-level constants computed from a stand-in (`FP8_MIN = -FP8_MAX` in verl's
    # utils/kernel/fp8_kernel.py, reached by validate_config's LoRA check) stay stand-ins.
    def __neg__(cls):
        return _stub(f"-{cls.__qualname__}")

    def __pos__(cls):
        return cls

    def __call__(cls, *args, **kwargs):
        if len(args) == 1 and callable(args[0]) and not kwargs:
            return args[0]  # used as a decorator: keep what it decorates
        return _stub(f"{cls.__qualname__}()")

    def __repr__(cls):
        return f"<stand-in {cls.__qualname__}>"


def _stub(name):
    return _StubMeta(name.rsplit(".", 1)[-1], (), {"__qualname__": name})


class _StubModule(types.ModuleType):
    def __getattr__(self, name):
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        return _stub(f"{self.__name__}.{name}")


class _Finder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def __init__(self, roots):
        self.roots = set(roots)
        self.used = set()

    def find_spec(self, name, path, target=None):
        root = name.split(".")[0]
        if name in ABSENT:
            raise ModuleNotFoundError(f"No module named {name!r} (stubs.ABSENT)", name=name)
        if root in self.roots:
            self.used.add(root)
            return importlib.machinery.ModuleSpec(name, self, is_package=True)
        return None

    def create_module(self, spec):
        module = _StubModule(spec.name)
        module.__path__ = []
        return module

    def exec_module(self, module):
        pass


_finder = None


def install(roots):
    """Answer imports of `roots` with stand-ins from now on."""
    global _finder
    _finder = _Finder(roots)
    sys.meta_path.insert(0, _finder)
    real_version = importlib.metadata.version

    def version(name):
        key = name.replace("-", "_").lower()
        if key in _finder.roots:
            return VERSIONS.get(key, "0.0.0")
        return real_version(name)

    importlib.metadata.version = version


def used():
    """The stand-ins that were imported, sorted."""
    return sorted(_finder.used) if _finder else []
