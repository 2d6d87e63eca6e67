"""Every exported torchtitan config loads through torchtitan 0.3.0's own ConfigManager (tyro over
the config function, trainer.py Trainer.Config.__post_init__ checks) and builds what was costed:
the model's shape, the precision converter, the degrees, and torchtitan's own pipeline split.
Needs the `torchtitan` extra (pyproject.toml); skipped, saying so, without it.

Two adjustments to run on a CPU machine, neither touching the config path:
* torchtitan.distributed.minimal_async_ep.kernels imports triton (a GPU compiler CPU torch does
  not ship) at import; its kernels never run while a config is parsed, so that one module is
  replaced by a stand-in when triton is absent;
* the float8 / MXFP8 converters refuse to build without an SM89 / SM100 GPU; the test reports
  the capability their check asks for, so the converters convert the model config as on the GPU.
"""

import sys
import types

import pytest
from tt_plans import known_answer_plans, plan_of

from trainplan.errors import TrainplanError
from trainplan.export import torchtitan as tt
from trainplan.models.stages import pipeline_chunks

KERNELS = "torchtitan.distributed.minimal_async_ep.kernels"


def _gpu_kernel(*args, **kwargs):
    raise RuntimeError("a triton kernel stand-in ran; only config parsing is tested here")


@pytest.fixture(scope="module")
def titan():
    try:
        import triton  # noqa: F401
    except ImportError:
        stand_in = types.ModuleType(KERNELS)
        stand_in.__getattr__ = lambda name: _gpu_kernel if not name.startswith("__") else None
        sys.modules.setdefault(KERNELS, stand_in)
    pytest.importorskip("torchtitan", reason="needs the torchtitan extra: pip install -e '.[torchtitan]'")
    import torchtitan.components.quantization.float8 as f8
    from torchtitan.components.quantization import mx
    from torchtitan.config import ConfigManager

    f8.has_cuda_capability = mx.has_cuda_capability = lambda major, minor: True
    return ConfigManager


def _load(titan, plan, tmp_path, monkeypatch):
    files = tt.export(plan)
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    monkeypatch.syspath_prepend(str(tmp_path))
    sys.modules.pop("trainplan_job", None)
    return titan().parse_args(["--module", "trainplan_job", "--config", "trainplan_job"])


def _plans():
    yield plan_of("fp8_rowwise ac=selective mb=1 ga=16 dp=1x2(fsdp) tp=2 pp=2 interleaved/v2 torch_compile=true "
                  "compiled_loss=true stack=torchtitan")
    yield plan_of("mxfp8 ac=full mb=2 ga=2 dp=2x8(fsdp) chunked_loss=true stack=torchtitan",
                  instance="ml.p6-b200.48xlarge", nodes=2)
    yield plan_of("bf16 ac=none mb=1 ga=8 dp=1x1(fsdp) tp=8 pp=8 1f1b stack=torchtitan", model="llama-3.1-405b",
                  instance="ml.p6-b200.48xlarge", nodes=8, seq_len=4096)
    yield plan_of("bf16 ac=full mb=1 ga=1 dp=1x4(fsdp) tp=2 ep=8 stack=torchtitan", model="qwen3-30b-a3b")
    for p in known_answer_plans():
        try:
            tt.export(p)
        except TrainplanError:
            continue
        yield p


def _config_kinds(cfg, seen=None) -> set[str]:
    """Qualified class names of every config nested in `cfg` (dataclass fields and lists)."""
    from dataclasses import fields, is_dataclass

    seen = set() if seen is None else seen
    if isinstance(cfg, list):
        for x in cfg:
            _config_kinds(x, seen)
    elif is_dataclass(cfg):
        seen.add(type(cfg).__qualname__)
        for f in fields(cfg):
            _config_kinds(getattr(cfg, f.name, None), seen)
    return seen


def test_every_exported_config_loads_through_torchtitans_config_manager(titan, tmp_path, monkeypatch):
    from torchtitan.distributed.pipeline_parallel import _generate_llm_fqn_per_model_part

    loaded = 0
    for i, plan in enumerate(_plans()):
        d = tmp_path / str(i)
        d.mkdir()
        c = _load(titan, plan, d, monkeypatch)
        m, L, w = plan.job.model, plan.layout, plan.job.workload
        model = c.model_spec.model
        assert (len(model.layers), model.dim, model.vocab_size) == (m.num_layers, m.hidden_size, m.vocab_size)
        p = c.parallelism
        assert (p.data_parallel_replicate_degree, p.data_parallel_shard_degree, p.tensor_parallel_degree,
                p.pipeline_parallel_degree, p.context_parallel_degree, p.expert_parallel_degree) == (
                    L.dp_replicate, L.dp_shard, L.tp, L.pp, L.cp, L.ep)
        assert (c.training.seq_len, c.training.global_batch_size) == (w.seq_len, w.global_batch)
        want = {"fp8_rowwise": "Float8Linear.Config", "mxfp8": "MXFP8Linear.Config"}.get(L.recipe.name)
        assert (want in _config_kinds(model.layers[0])) if want else not ({"Float8Linear.Config",
                                                                          "MXFP8Linear.Config"} & _config_kinds(model))
        assert type(c.activation_checkpoint).__qualname__ == {"none": "NoneType", "selective": "SelectiveAC.Config",
                                                               "full": "FullAC.Config"}[L.ac]
        if L.pp > 1:  # torchtitan's own split of the layers over the stages is the one costed
            parts = _generate_llm_fqn_per_model_part(L.pp * L.vp, m.num_layers, p.pipeline_parallel_first_stage_less_layers,
                                                     p.pipeline_parallel_last_stage_less_layers)
            got = [sum(n.startswith("layers.") for n in part) for part in parts]
            assert got == [len(r) for r in pipeline_chunks(m.num_layers, L.pp, L.vp, L.uneven)]
        loaded += 1
    assert loaded >= 8


def test_every_field_source_line_names_its_field_in_the_installed_release(titan):
    """torchtitan.toml's FILE:LINE sources point at the field in torchtitan 0.3.0 (a release that
    moves or renames one fails here: the data file is the one place to change)."""
    from importlib.metadata import version
    from pathlib import Path

    import torchtitan

    assert version("torchtitan") == tt.RELEASE
    root = Path(torchtitan.__file__).parent
    for cls, keys in tt.data()["fields"].items():
        for key, where in keys.items():
            path, line = where.rsplit(":", 1)
            text = (root / path).read_text().splitlines()[int(line) - 1]
            assert key in text, f"{cls}.{key}: {where} reads {text.strip()!r}"
