"""Give the argument vectors orch's launch scripts pass to the trainers to the trainers' own
config code, and report what each accepted or refused, with the trainer's own error text.

    python check.py TRAINER CASES.json      (TRAINER: verl, areal, rl-swarm or torchrun)

CASES.json is a list of {"label", "argv", "cwd", "schema"?, "expect"?}: `argv` is what the launch script
passed to its interpreter (`python3`/`python`) after bash expanded it, recorded by a stand-in
interpreter, `cwd` where it was run, `schema` the template's keys.yaml where the trainer's own
config file is not in a package, `expect` values (`dotted.key: value`) the trainer must read
exactly. One JSON object per case is printed to stdout:
{"label", "ok", "stage", "error"}, then {"stand_ins": [...]}: the modules answered by stand-ins
(stubs.py).

What each trainer's check runs, as the trainer itself would:
- verl 0.9.1: `hydra.compose("ppo_trainer", overrides)` on the installed verl's trainer/config,
  which is what `verl.trainer.main_ppo`'s `@hydra.main` does, then `main_ppo`'s own
  `validate_config(config, need_reference_policy(config), need_critic(config))` (the entry module itself
  is not imported: its module level queries the GPU; its `@hydra.main` arguments are read from
  its source). Every override's
  value must keep the type of verl's default, and no string may still start with `~` (nothing
  expands it on a node).
- AReaL 1.0.4: the launcher module must exist in the installed AReaL; its `main()` steps —
  `parse_cli_args(argv)`, `to_structured_cfg` of `recover` and `cluster`,
  `validate_config_for_launcher` (which parses the allocation mode with AReaL's own parser);
  then what the launcher's `shell=True` command hands the trainer (`" ".join(argv)` split again
  by a shell) must be the same arguments; then the entry script's `load_expr_config` stages
  (`parse_cli_args`, `to_structured_cfg(GRPOConfig)`, `OmegaConf.to_object`). AReaL's example
  config is not in its wheel: the primary config is the template's keys.yaml (generated from
  AReaL's released examples/math/gsm8k_grpo.yaml, identical at v1.0.4), written where `--config`
  points when that file is missing.
- RL Swarm: `hydra.compose` on a primary config built from the template's keys.yaml (written by
  hand from rgym_exp/config/rg-swarm.yaml at the pinned commit; rl-swarm is not on PyPI and its
  file is not copied into this project), so Hydra's grammar and struct mode (`++` for added
  keys) are the real ones; then `game_manager.trainer.config`, resolved, must build genrl
  0.1.11's own `GRPOTrainerConfig` (its dataclass refuses unknown fields), and `training.dtype`
  must be a key of genrl's `DTYPE_MAP`.
- torchrun (examples/torchrun/train.py): the script's own `parse_args`, `load_config` and
  `read_settings` on the rendered train_config.yaml.
"""

import contextlib
import importlib.util
import io
import json
import os
import subprocess
import sys
import traceback

import stubs

HERE = os.path.dirname(os.path.abspath(__file__))


def unflatten(flat):
    """`a.b.0.c: v` → nested dicts (lists where every key of a level is 0..n-1)."""
    tree = {}
    for key, value in flat.items():
        if key.startswith("+") or key.endswith(".*"):
            continue
        node = tree
        parts = key.split(".")
        for part in parts[:-1]:
            node = node.setdefault(part, {})
        node[parts[-1]] = value

    def lists(node):
        if not isinstance(node, dict):
            return node
        node = {k: lists(v) for k, v in node.items()}
        if node and all(k.isdigit() for k in node) and sorted(int(k) for k in node) == list(range(len(node))):
            return [node[str(i)] for i in range(len(node))]
        return node

    return lists(tree)


def write_primary_config(schema, path):
    import yaml

    with open(schema) as f:
        flat = yaml.safe_load(f)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        yaml.safe_dump(unflatten(flat), f, sort_keys=False)


def override_keys(overrides):
    for o in overrides:
        if "=" in o and not o.startswith("~"):
            yield o.split("=", 1)[0].lstrip("+")


def literal_tildes(cfg, overrides):
    from omegaconf import OmegaConf

    bad = []
    for key in override_keys(overrides):
        value = OmegaConf.select(cfg, key, throw_on_missing=False)
        if isinstance(value, str) and value.startswith("~"):
            bad.append(f"{key}={value}")
    return bad


def read_back(cfg, overrides, case, trainer):
    """What the trainer read: no path still starting with `~`, and the case's expected values."""
    tildes = literal_tildes(cfg, overrides)
    if tildes:
        raise Refused("paths", f"a literal ~ reaches {trainer}, which does not expand it: {tildes}")
    expect_values(cfg, case)


def expect_values(cfg, case):
    """The values a case says the trainer must read, compared with what it read."""
    from omegaconf import OmegaConf

    for key, want in case.get("expect", {}).items():
        got = OmegaConf.select(cfg, key, throw_on_missing=False)
        if OmegaConf.is_config(got):
            got = OmegaConf.to_container(got, resolve=True)
        if got != want:
            raise Refused("values", f"{key}: the trainer read {got!r}, orch meant {want!r}")


class Refused(Exception):
    def __init__(self, stage, message):
        super().__init__(message)
        self.stage = stage


def quietly(fn, *args, **kwargs):
    """Call fn with the trainer's own prints kept off our stdout (which carries the JSON)."""
    with contextlib.redirect_stdout(io.StringIO()):
        return fn(*args, **kwargs)


def hydra_main_arguments(path):
    """`config_path` and `config_name` of the `@hydra.main(...)` in a module's source."""
    import ast

    with open(path) as f:
        tree = ast.parse(f.read())
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and getattr(node.func, "attr", None) == "main" and getattr(node.func.value, "id", None) == "hydra":
            args = {k.arg: ast.literal_eval(k.value) for k in node.keywords if k.arg in ("config_path", "config_name")}
            return args["config_path"], args["config_name"]
    raise RuntimeError(f"no @hydra.main in {path}")


# --- verl ----------------------------------------------------------------------------------

def verl_checker():
    stubs.install(stubs.VERL)
    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf

    from verl.trainer.ppo.utils import need_critic, need_reference_policy
    from verl.utils.config import validate_config

    # main_ppo itself is not imported (its module level asks the GPU for its capability): its
    # `@hydra.main(config_path=..., config_name=...)` is read from its source instead.
    main_file = importlib.util.find_spec("verl.trainer.main_ppo").origin
    config_path, config_name = hydra_main_arguments(main_file)
    config_dir = os.path.join(os.path.dirname(main_file), config_path)
    init = initialize_config_dir(config_dir=config_dir, version_base=None)
    init.__enter__()
    defaults = compose(config_name)

    def check(case):
        argv = case["argv"]
        if argv[:2] != ["-m", "verl.trainer.main_ppo"]:
            raise Refused("launch", f"expected `-m verl.trainer.main_ppo`, got {argv[:2]}")
        overrides = argv[2:]
        try:
            cfg = compose(config_name, overrides=overrides)
        except Exception as e:
            raise Refused("hydra", f"{type(e).__name__}: {e}")
        for key in override_keys(overrides):
            old = OmegaConf.select(defaults, key, throw_on_missing=False)
            new = OmegaConf.select(cfg, key, throw_on_missing=False)
            if old is None or new is None:
                continue
            # A number for a number (verl's YAML writes `0` where its dataclass field is a float).
            numbers = {int, float}
            same = type(old) is type(new) or {type(old), type(new)} <= numbers
            # PEFT's module selections are a string or a list in verl 0.9.1
            # (verl/workers/config/model.py: `target_modules: Optional[Any] = "all-linear"  #
            # allow both "all-linear" and ["q_proj","k_proj"]`, checked as str or list).
            if key.rsplit(".", 1)[-1] in ("target_modules", "exclude_modules"):
                same = same or (isinstance(old, str) and OmegaConf.is_list(new))
            if not same:
                raise Refused("types", f"{key}: verl's default is {type(old).__name__} ({old!r}), orch passed {type(new).__name__} ({new!r})")
        read_back(cfg, overrides, case, "verl")
        try:
            quietly(
                validate_config,
                config=cfg,
                use_reference_policy=need_reference_policy(cfg),
                use_critic=need_critic(cfg),
            )
        except Exception as e:
            raise Refused("validate_config", f"{type(e).__name__}: {e}")

    return check


# --- AReaL ---------------------------------------------------------------------------------

def areal_checker():
    stubs.install(stubs.AREAL)
    from omegaconf import OmegaConf

    from areal.api.cli_args import ClusterSpecConfig, GRPOConfig, RecoverConfig, parse_cli_args, to_structured_cfg
    from areal.infra.utils.launcher import validate_config_for_launcher

    def check(case):
        argv = case["argv"]
        if argv[:1] != ["-m"] or len(argv) < 2:
            raise Refused("launch", f"expected `-m MODULE`, got {argv[:2]}")
        module, args = argv[1], argv[2:]
        try:
            found = importlib.util.find_spec(module) is not None
        except ModuleNotFoundError:
            found = False
        if not found:
            raise Refused("launch", f"AReaL 1.0.4 has no module {module}")
        os.chdir(case["cwd"])
        config = args[args.index("--config") + 1] if "--config" in args else None
        if config is None:
            raise Refused("launch", "no --config")
        if not os.path.exists(config):
            write_primary_config(case["schema"], os.path.abspath(config))
        try:
            cfg, _ = quietly(parse_cli_args, args)
            cfg.recover = to_structured_cfg(cfg.recover, RecoverConfig)
            cfg.cluster = to_structured_cfg(cfg.cluster, ClusterSpecConfig)
            quietly(validate_config_for_launcher, cfg)
        except Exception as e:
            raise Refused("launcher", f"{type(e).__name__}: {e}")
        # What the launcher's `subprocess.Popen(cmd, shell=True)` hands the trainer: the joined
        # arguments read again by a real /bin/sh (expansions included, unlike shlex).
        joined = subprocess.run(["/bin/sh", "-c", "printf '%s\\0' " + " ".join(args)],
                                capture_output=True, check=True).stdout
        rejoined = joined.decode().split("\0")[:-1]
        if rejoined != args:
            changed = [f"{a!r} → {b!r}" for a, b in zip(args, rejoined) if a != b] or [f"{len(args)} arguments became {len(rejoined)}"]
            raise Refused("launcher shell", f"the launcher's shell command changes the arguments: {changed[:3]}")
        try:
            cfg, _ = quietly(parse_cli_args, rejoined)
            cfg = to_structured_cfg(cfg, config_cls=GRPOConfig)
            obj = OmegaConf.to_object(cfg)
            assert isinstance(obj, GRPOConfig)
        except Exception as e:
            raise Refused("load_expr_config", f"{type(e).__name__}: {e}")
        read_back(cfg, args, case, "AReaL")

    return check


# --- RL Swarm ------------------------------------------------------------------------------

def rl_swarm_checker():
    stubs.install(stubs.VERL)
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra
    from omegaconf import OmegaConf

    import genrl.trainer.grpo_trainer as grpo

    # rgym_exp registers this resolver at import (rgym_exp/src/utils/omega_gpu_resolver.py); it
    # picks a model from the pools by GPU memory. Here it answers the first pool's first model.
    if not OmegaConf.has_resolver("gpu_model_choice"):
        OmegaConf.register_new_resolver("gpu_model_choice", lambda large, small: large[0])
    dtypes = getattr(grpo, "DTYPE_MAP", None)

    def check(case):
        argv = case["argv"]
        if argv[:2] != ["-m", "rgym_exp.runner.swarm_launcher"]:
            raise Refused("launch", f"expected `-m rgym_exp.runner.swarm_launcher`, got {argv[:2]}")
        args = list(argv[2:])
        config_dir = args[args.index("--config-path") + 1]
        config_name = args[args.index("--config-name") + 1]
        overrides = [a for i, a in enumerate(args) if not a.startswith("--") and (i == 0 or args[i - 1] not in ("--config-path", "--config-name"))]
        path = os.path.join(config_dir, config_name)
        if not os.path.exists(path):
            write_primary_config(case["schema"], path)
        GlobalHydra.instance().clear()
        try:
            with initialize_config_dir(config_dir=config_dir, version_base=None):
                cfg = compose(config_name.removesuffix(".yaml"), overrides=overrides)
        except Exception as e:
            raise Refused("hydra", f"{type(e).__name__}: {e}")
        trainer = OmegaConf.to_container(cfg.game_manager.trainer.config, resolve=True)
        trainer.pop("_target_", None)
        try:
            grpo.GRPOTrainerConfig(**trainer)
        except Exception as e:
            raise Refused("GRPOTrainerConfig", f"{type(e).__name__}: {e}")
        if dtypes is not None and cfg.training.dtype not in dtypes:
            raise Refused("dtype", f"training.dtype {cfg.training.dtype!r} is not in genrl's DTYPE_MAP {sorted(dtypes)}")
        read_back(cfg, overrides, case, "rl-swarm")

    return check


# --- torchrun ------------------------------------------------------------------------------

def torchrun_checker():
    stubs.install(["torch", "transformers"])
    spec = importlib.util.spec_from_file_location("train", os.path.join(HERE, "..", "..", "examples", "torchrun", "train.py"))
    train = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(train)

    def check(case):
        argv = case["argv"]
        # torchrun's own flags come first; the script's command line starts at the script.
        script = next((i for i, a in enumerate(argv) if a.endswith(".py")), None)
        if script is None:
            raise Refused("launch", f"no training script in {argv}")
        os.chdir(case["cwd"])
        old = sys.argv
        sys.argv = argv[script:]
        try:
            args = train.parse_args()
            cfg, get = train.load_config(args.config)
            train.read_settings(get)
            train.model_config(get)
        except SystemExit as e:
            raise Refused("parse_args", f"argparse exited {e.code}")
        except Exception as e:
            raise Refused("config", f"{type(e).__name__}: {e}")
        finally:
            sys.argv = old

    return check


CHECKERS = {"verl": verl_checker, "areal": areal_checker, "rl-swarm": rl_swarm_checker, "torchrun": torchrun_checker}


def main():
    trainer, cases_file = sys.argv[1], sys.argv[2]
    # The trainers print at import and while checking; only our JSON lines go to stdout.
    out = sys.stdout
    sys.stdout = sys.stderr
    with open(cases_file) as f:
        cases = json.load(f)
    check = CHECKERS[trainer]()
    start = os.getcwd()
    for case in cases:
        result = {"label": case["label"], "ok": True, "stage": None, "error": None}
        try:
            check(case)
        except Refused as e:
            result.update(ok=False, stage=e.stage, error=str(e))
        except Exception as e:
            result.update(ok=False, stage="checker", error="".join(traceback.format_exception(e))[-2000:])
        finally:
            os.chdir(start)
        print(json.dumps(result), file=out, flush=True)
    print(json.dumps({"stand_ins": stubs.used()}), file=out, flush=True)


if __name__ == "__main__":
    main()
