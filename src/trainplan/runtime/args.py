"""The run flags shared by `trainplan train` (which starts torchrun) and `python -m
trainplan.runtime` (each rank): defined once, so the wrapper passes through exactly what a rank
reads. Torch-free: the CLI imports it without the torch extra."""

from __future__ import annotations

from trainplan.runtime.numerics import DEFAULT_MAX_IN_ROW
from trainplan.runtime.preflight import DEFAULT_KEEP

# Set by `trainplan train` in the environment of the ranks it starts: it reads their summary.json
# and says a stop they agreed on itself, so a rank then exits 0 without printing it.
SUPERVISED = "TRAINPLAN_SUPERVISED"


def at_least(low: int):
    """argparse type: an integer >= low, with a message that says so."""

    def parse(text: str) -> int:
        import argparse

        try:
            v = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected an integer >= {low}, got {text!r}") from None
        if v < low:
            raise argparse.ArgumentTypeError(f"expected an integer >= {low}, got {v}")
        return v

    return parse


DEMO_ONLY = "--model, --ep, --tp and --etp choose the demo; a plan carries its own model and layout"
DEMO_FLAGS = ("model", "ep", "tp", "etp")


def demo_flags_given(args) -> bool:
    """Whether any demo-only flag (DEMO_ONLY) was given: with --plan that is refused."""
    return any(getattr(args, k, None) for k in DEMO_FLAGS)

# (flag, takes a value, argparse keywords): passed from `trainplan train` to every rank unchanged.
PASSED = (
    ("--steps", True, {"type": int, "help": "optimizer steps (default: the plan's train.steps; demo 30)"}),
    ("--checkpoint-dir", True, {"help": "write DCP checkpoints here and resume from the newest one"}),
    ("--checkpoint-every", True, {"type": at_least(1), "metavar": "N",
                                  "help": "save a checkpoint every N steps (default: the plan's train.checkpoint_every; "
                                          "the demo's: only at the end); needs --checkpoint-dir"}),
    ("--tensorboard", True, {"metavar": "DIR", "help": "also write TensorBoard scalars to DIR"}),
    ("--data", True, {"help": "training data: files/directories of .txt .jsonl .parquet .npy .bin "
                              "(default: the plan's, else the standard library's sources)"}),
    ("--tokenizer", True, {"help": "a local tokenizer.json (default: byte-level)"}),
    ("--hf", False, {"help": "build the Hugging Face model from the plan's hf_config"}),
    ("--fit-world", False, {"help": "rescale dp_shard (and the global batch) to the processes started"}),
    ("--no-progress", False, {"help": "no per-step progress on stderr"}),
    ("--model", True, {"help": "demo only (no --plan): tiny-moe or demo-llama-tiny (the default)"}),
    ("--ep", True, {"type": int, "help": "demo only (no --plan): expert parallel degree (divides the processes)"}),
    ("--tp", True, {"type": int, "help": "demo only (no --plan): tensor parallel degree (divides the processes; "
                                         "MoE experts split over it too, etp = tp, unless --etp 1)"}),
    ("--etp", True, {"type": int, "choices": (1,), "help": "demo only (no --plan): 1 = whole MoE experts under --tp, "
                                                       "each tp rank routing its own sequence shard (sequence parallel)"}),
    ("--device", True, {"choices": ("cuda", "cpu"),
                        "help": "cuda (a plan's default; refused when torch sees no GPU) or cpu (gloo; the demo's "
                                "default without a GPU)"}),
    ("--max-nonfinite", True, {"type": at_least(1), "metavar": "K",
                               "help": "stop after K steps in a row with a non-finite loss or gradient norm (each is "
                                       f"skipped: no update); default {DEFAULT_MAX_IN_ROW}"}),
    ("--keep-checkpoints", True, {"type": at_least(2), "metavar": "N",
                                  "help": f"checkpoints kept, the one being written included (>= 2; default {DEFAULT_KEEP}); the "
                                          "directory must have room for N"}),
)


def add_run_arguments(p, steps_type=int) -> None:
    """--plan, --out and the passed-through flags; `steps_type` lets the CLI refuse non-positive steps."""
    p.add_argument("--plan", help="plan.json to run (default: the built-in demo model)")
    p.add_argument("--out", help="run directory for measurements.jsonl and summary.json (default: runs/<time>)")
    for flag, takes_value, kw in PASSED:
        kw = dict(kw)
        if not takes_value:
            kw["action"] = "store_true"
        elif flag == "--steps":
            kw["type"] = steps_type
        p.add_argument(flag, **kw)
