"""Exported Megatron-LM arguments checked by Megatron's own code at the pinned release (0.16.1).

- With the megatron-core wheel (the `megatron` extra): every exported plan builds a
  TransformerConfig (MLATransformerConfig with multi-latent attention) and a
  DistributedDataParallelConfig, whose __post_init__ checks run; the config is filled from the
  arguments as megatron/training/arguments.py core_transformer_config_from_args does at
  core_v0.16.1 (arguments.py:1306: every config field named like an argument, plus the renames
  listed in _RENAMES).
- With a Megatron-LM checkout of core_v0.16.1 (MEGATRON_LM=/path; the parser is not in the wheel):
  every flag of megatron.toml has the dest, kind and default the parser gives it, and every exported
  file passes parse_args + validate_args + core_transformer_config_from_args (megatron_check.py).
"""

import dataclasses
import os
import subprocess
import sys
from pathlib import Path

import pytest
from megatron_plans import every_plan, make_plans

from trainplan.errors import TrainplanError
from trainplan.export import megatron as mg
from trainplan.export.megatron_read import _parse_flags

core = pytest.importorskip("megatron.core", reason="the megatron extra (megatron-core) is not installed")
CHECK = Path(__file__).with_name("megatron_check.py")


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """(plan, argument values by dest, args file path) for every exportable known-answer plan."""
    folder = tmp_path_factory.mktemp("megatron")
    out = []
    for name, plan in make_plans(folder).items():
        for i, p in enumerate(every_plan(plan)):
            try:
                text = mg.export(p)[mg.ARGS_FILE]
            except TrainplanError:
                continue  # test_megatron.py pins which refusals these are
            path = folder / f"{name}-{i}.txt"
            path.write_text(text)
            body = [t for ln in text.splitlines() if not ln.startswith("#") for t in ln.split()]
            out.append((p, _parse_flags(body, str(path)), path))
    return out


# core_transformer_config_from_args (arguments.py:1306-1335 at core_v0.16.1): arguments whose config
# field has another name or value
_RENAMES = {"num_experts": "num_moe_experts", "decoder_first_pipeline_num_layers": "num_layers_in_first_pipeline_stage",
            "decoder_last_pipeline_num_layers": "num_layers_in_last_pipeline_stage", "fp8_param_gather": "fp8_param"}


def _transformer_config(args: dict):
    import torch
    import torch.nn.functional as F
    from megatron.core.transformer.transformer_config import MLATransformerConfig, TransformerConfig

    cls = MLATransformerConfig if args.get("multi_latent_attention") else TransformerConfig
    names = {f.name for f in dataclasses.fields(cls)}
    kw = {_RENAMES.get(k, k): v for k, v in args.items() if _RENAMES.get(k, k) in names}
    if args.get("num_virtual_stages_per_pipeline_rank"):
        kw["virtual_pipeline_model_parallel_size"] = args["num_virtual_stages_per_pipeline_rank"]
    kw["num_query_groups"] = args.get("num_query_groups") if args.get("group_query_attention") else None
    if args.get("swiglu"):
        kw |= {"activation_func": F.silu, "gated_linear_unit": True}
    if "cp_comm_type" in kw:
        kw["cp_comm_type"] = kw["cp_comm_type"][0]
    dtype = torch.bfloat16 if args.get("bf16") else torch.float16
    kw |= {"params_dtype": dtype, "pipeline_dtype": dtype, "batch_p2p_comm": not args.get("overlap_p2p_comm", True)}
    return cls(**kw)


@pytest.fixture
def te_release(monkeypatch):
    """TransformerConfig asks TE's version for fp8 / fp4 / MoE checks; TE is a GPU build, so the lowest
    release megatron-core 0.16.1 accepts is told (pyproject.toml: transformer-engine>=2.9.0a0)."""
    from megatron.core import utils
    from packaging.version import Version

    monkeypatch.setattr(utils, "get_te_version", lambda: Version("2.9.0"))


def test_the_pinned_release_is_installed():
    assert core.__version__ == mg.RELEASE


def test_every_export_builds_megatron_cores_configs(exported, te_release):
    from megatron.core.distributed import DistributedDataParallelConfig

    assert len(exported) >= 25
    for p, args, path in exported:
        cfg = _transformer_config(args)
        L = p.layout
        assert (cfg.tensor_model_parallel_size, cfg.pipeline_model_parallel_size, cfg.context_parallel_size) == (
            L.tp, L.pp, L.cp), path
        assert cfg.num_layers == p.job.model.num_layers and cfg.sequence_parallel == (L.tp > 1 and L.sequence_parallel)
        assert cfg.recompute_granularity == {"none": None, "selective": "selective"}.get(L.ac, "full"), path
        if p.job.model.moe is not None:
            assert (cfg.num_moe_experts, cfg.expert_model_parallel_size) == (p.job.model.moe.num_experts, L.ep)
            assert cfg.expert_tensor_parallel_size == L.expert_groups.etp
        ddp = DistributedDataParallelConfig(
            overlap_grad_reduce=args.get("overlap_grad_reduce", False),
            overlap_param_gather=args.get("overlap_param_gather", False),
            use_distributed_optimizer=args.get("use_distributed_optimizer", False),
            num_distributed_optimizer_instances=args.get("num_distributed_optimizer_instances", 1),
            use_megatron_fsdp=args.get("use_megatron_fsdp", False),
            data_parallel_sharding_strategy=args.get("data_parallel_sharding_strategy", "no_shard"),
            grad_reduce_in_fp32=not args.get("grad_reduce_in_bf16", False))
        assert ddp.overlap_grad_reduce == L.execution.grad_reduce_overlap


def test_megatron_core_refuses_what_the_export_never_writes(te_release):
    # the check above can fail: a layout Megatron refuses is refused by the same construction
    with pytest.raises((AssertionError, ValueError)):
        _transformer_config({"num_layers": 4, "hidden_size": 256, "num_attention_heads": 8, "bf16": True,
                             "tensor_model_parallel_size": 3})


_CHECKOUT = os.environ.get("MEGATRON_LM")
needs_checkout = pytest.mark.skipif(not _CHECKOUT, reason="MEGATRON_LM (a checkout of core_v0.16.1) not given")


def _run(*argv) -> dict:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([_CHECKOUT, *sys.path]))
    out = subprocess.run([sys.executable, str(CHECK), *argv], env=env, capture_output=True, text=True, timeout=900,
                         check=False)
    results = dict(ln[len("RESULT "):].split(": ", 1) for ln in out.stdout.splitlines() if ln.startswith("RESULT "))
    assert results, out.stderr[-2000:]
    return results


@pytest.mark.slow
@needs_checkout
def test_every_flag_is_the_parsers(tmp_path):
    import json

    spec = tmp_path / "args.json"
    spec.write_text(json.dumps(mg.names()["args"]))
    results = _run("names", str(spec))
    assert {k: v for k, v in results.items() if v != "OK"} == {}
    assert set(results) == set(mg.names()["args"])


@pytest.mark.slow
@needs_checkout
def test_every_export_passes_megatrons_validate_args(exported):
    arch = {"hopper": 9, "blackwell": 10}
    groups = {}
    for p, _, path in exported:
        key = (arch[p.job.cluster.gpu.arch], p.job.cluster.num_gpus)
        groups.setdefault(key, []).append(str(path))
    failed = {}
    for (major, world), paths in groups.items():
        failed |= {k: v for k, v in _run("args", str(major), str(world), *paths).items() if v != "OK"}
    assert failed == {}


@pytest.mark.slow
@needs_checkout
def test_the_block_megatron_prints_reads_back(exported):
    p, _, path = next(e for e in exported if e[0].job.model.moe is not None)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([_CHECKOUT, *sys.path]))
    out = subprocess.run([sys.executable, str(CHECK), "args", "9" if p.job.cluster.gpu.arch == "hopper" else "10",
                          str(p.job.cluster.num_gpus), str(path)], env=env, capture_output=True, text=True,
                         timeout=900, check=False).stdout
    imp = mg.read(out, "megatron stdout")  # validate_args printed it, from the exported arguments
    assert imp.layout == mg.read(path.read_text(), str(path)).layout
