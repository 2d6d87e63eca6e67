"""Build exported NeMo 2 recipe scripts with NeMo's own classes (a subprocess of
test_nemo_framework.py, run with NeMo 2.7.3 and nemo_run importable: NEMO_SITE=/path on PYTHONPATH).

    python nemo_check.py FILE...

For each script: run its recipe function (nemo_run's Config refuses a keyword the target class does
not take), check every `recipe.trainer.strategy.X` against MegatronStrategy.__init__'s parameters
(its **kwargs would accept anything), then build the model config, optimizer config, DDP config,
precision plugin, comm-overlap callback and LR scheduler, which runs Megatron-Core's
TransformerConfig / OptimizerConfig / DistributedDataParallelConfig checks. On a CPU machine one thing is
told rather than probed: apply_rope_fusion off (a TransformerEngine kernel TransformerConfig refuses
without TE, as megatron_check.py does). The data module is not built (it fetches a tokenizer).
Prints `RESULT FILE: OK` or `RESULT FILE: the error`.
"""

import importlib.util
import inspect
import sys


def check(path: str) -> str:
    import fiddle as fdl
    from nemo import lightning as nl

    params = set(inspect.signature(nl.MegatronStrategy.__init__).parameters)
    spec = importlib.util.spec_from_file_location("exported_recipe", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    fn = next(v for k, v in vars(mod).items() if k.endswith("_recipe") and callable(v))
    recipe = fn()
    with open(path) as f:
        for line in f:
            s = line.strip()
            if s.startswith("recipe.trainer.strategy.") and not s.startswith("recipe.trainer.strategy.ddp."):
                name = s.split("=")[0].strip().rsplit(".", 1)[1]
                if name not in params:
                    return f"MegatronStrategy has no parameter {name}"
    recipe.model.config.apply_rope_fusion = False
    for part in (recipe.model.config, recipe.optim.config, recipe.trainer.strategy.ddp, recipe.trainer.plugins,
                 *recipe.trainer.callbacks, recipe.optim.lr_scheduler):
        fdl.build(part)
    return "OK"


if __name__ == "__main__":
    for path in sys.argv[1:]:
        try:
            verdict = check(path)
        except BaseException as e:  # noqa: BLE001 - NeMo's or Megatron-Core's refusal is the verdict
            verdict = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
        print(f"RESULT {path}: {verdict}")
