"""Run Megatron-LM's own argument code on exported argument files (a subprocess of
test_megatron_mcore.py, given a Megatron-LM checkout at the pinned tag: MEGATRON_LM=/path).

    python megatron_check.py names TOML_JSON          every flag's dest, kind and default as the parser has them
    python megatron_check.py args ARCH WORLD FILE...  parse_args + validate_args + core_transformer_config_from_args

The megatron-core wheel holds megatron/core only; megatron/training (the parser) comes from the
checkout. Its package __init__ imports the trainer (triton, a GPU build), so the package is stood up
empty and only arguments.py and what it imports are loaded. On a CPU machine three things are told
rather than probed: the GPU's major compute capability (ARCH: 9 Hopper, 10 Blackwell), the
TransformerEngine release (2.9.0, the lowest megatron-core 0.16.1's pyproject.toml accepts:
transformer-engine>=2.9.0a0,<2.12.0) and apply_rope_fusion off (a TE kernel: TransformerConfig
refuses it without TE installed). Prints `RESULT NAME: OK` or `RESULT NAME: the error` per argument or
file (Megatron prints its own lines around them).
"""

import importlib
import json
import os
import sys
import types


def open_text(path: str) -> str:
    with open(path) as f:
        return f.read()


def _arguments(root: str):
    pkg = types.ModuleType("megatron.training")
    pkg.__path__ = [os.path.join(root, "megatron", "training")]
    sys.modules["megatron.training"] = pkg
    gv = importlib.import_module("megatron.training.global_vars")
    for k in dir(gv):
        if k.startswith("get_"):
            setattr(pkg, k, getattr(gv, k))
    return importlib.import_module("megatron.training.arguments")


def names(A, spec_path: str) -> None:
    import argparse

    p = argparse.ArgumentParser(allow_abbrev=False)
    A.add_megatron_arguments(p)
    actions = {s: a for a in p._actions for s in a.option_strings}
    for dest, want in json.loads(open_text(spec_path)).items():
        a = actions.get(want["flag"])
        if a is None:
            print(f"RESULT {dest}: no flag {want['flag']}")
            continue
        kind = {"_StoreTrueAction": "true", "_StoreFalseAction": "false"}.get(
            type(a).__name__, "list" if a.nargs in ("+", "*") else "value")
        got = {"dest": a.dest, "kind": kind}
        exp = {"dest": dest, "kind": want["kind"]}
        if kind in ("value", "list"):
            got["default"], exp["default"] = a.default, want.get("default")
        print(f"RESULT {dest}: OK" if got == exp else f"RESULT {dest}: parser {got} != data {exp}")


def check_args(A, arch: int, world: int, files: list[str]) -> None:
    import megatron.core.utils as U
    import torch
    from packaging.version import Version

    A.get_device_arch_version = lambda: arch
    torch.cuda.get_device_capability = lambda *a, **k: (arch, 0)
    U.get_te_version = lambda: Version("2.9.0")
    os.environ["WORLD_SIZE"] = str(world)
    for path in files:
        tokens = [t for line in open_text(path).splitlines() if not line.startswith("#") for t in line.split()]
        sys.argv = ["pretrain_gpt.py", *tokens]
        try:
            args = A.parse_args()
            A.validate_args(args)
            args.apply_rope_fusion = False
            A.core_transformer_config_from_args(args)
            print(f"RESULT {path}: OK")
        except BaseException as e:  # noqa: BLE001 - an assert or argparse's SystemExit is the verdict
            print(f"RESULT {path}: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}")


if __name__ == "__main__":
    A = _arguments(os.environ["MEGATRON_LM"])
    if sys.argv[1] == "names":
        names(A, sys.argv[2])
    else:
        check_args(A, int(sys.argv[2]), int(sys.argv[3]), sys.argv[4:])
