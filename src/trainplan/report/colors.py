"""One colour per category for every report page: a memory term, a step-time part, a parallel
dimension, a link tier or a GPU has the same colour on the plan, compare and validate pages,
whatever else the page shows (colours assigned by order of appearance change from page to page).

The palette is plotly's "Safe" set (readable by colour-blind people). Colours are unique within
each kind of category, which is what one plot shows; an unknown category gets a colour from a
hash of its name, stable across pages and runs.
"""

from __future__ import annotations

import zlib

PALETTE = ("#88CCEE", "#CC6677", "#DDCC77", "#117733", "#332288", "#AA4499", "#44AA99",
           "#999933", "#882255", "#661100", "#6699CC", "#888888")
GREY = "#BBBBBB"
CHOSEN = "#CC3311"

MEMORY = {"parameters": "#88CCEE", "gradients": "#CC6677", "optimizer states": "#DDCC77",
          "activations": "#117733", "logits and loss": "#332288", "runtime overheads": "#AA4499"}
# a parallel dimension has one colour: its collectives in the ledger and its exposed time
DIMENSIONS = {"dp": "#DDCC77", "fsdp": "#999933", "tp": "#44AA99", "pp": "#6699CC", "cp": "#882255",
              "ep": "#661100", "offload": "#AA4499"}
STEP_TIME = {"GEMM + attention": "#88CCEE", "recompute": "#CC6677", "non-GEMM": "#332288",
             "optimizer": "#117733", "bubble": "#888888", "overhead": GREY, "kernel launch": "#DDDDDD",
             **{f"exposed comm {d}": c for d, c in DIMENSIONS.items() if d != "offload"},
             "exposed offload copies": DIMENSIONS["offload"]}
TIERS = {"nvlink": "#117733", "pcie": "#DDCC77", "efa": "#CC6677", "ib": "#CC6677", "roce": "#CC6677",
         "tcpxo": "#CC6677"}
# plotly bar patterns tell the collectives of one dimension apart
PATTERNS = {"all_gather": "", "reduce_scatter": "/", "all_reduce": "x", "all_to_all": "+", "p2p": ".",
            "d2h": "-", "h2d": "|"}


def _hashed(name: str) -> str:
    return PALETTE[zlib.crc32(name.encode()) % len(PALETTE)]


def gpu_color(gpu: str) -> str:
    """GPUs in catalog order (hardware/gpus.toml) take the palette in turn; others by hash."""
    from trainplan.hardware import gpus

    names = list(gpus())
    return PALETTE[names.index(gpu) % len(PALETTE)] if gpu in names else _hashed(gpu)


def color(kind: str, name: str) -> str:
    """The colour of category `name` of `kind` ('memory', 'step_time', 'dimension', 'tier', 'gpu')."""
    if kind == "gpu":
        return gpu_color(name)
    table = {"memory": MEMORY, "step_time": STEP_TIME, "dimension": DIMENSIONS, "tier": TIERS}[kind]
    return table.get(name) or _hashed(name)
