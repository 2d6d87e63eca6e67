"""The rows of `trainplan compare --json` and the points of `trainplan validate --json`, as flat
views for tables and plots. No plotly here: the terminal summaries use these too.

compare output (commands/compare.py) is read as

    {"model": name, "seq_len": N, "tokens": N,
     "instances": [{"instance", "gpu", "gpus_per_node", "fits", "nodes", "layout", "micro_batch",
                    "longest_seq_len", "tokens_per_s", "tokens_per_s_per_gpu", "mfu",
                    <costs.cost.Cost fields: cost_per_hour, usd_per_million_tokens,
                     hours_to_tokens, usd_to_tokens, price_kind>, "goodput", "checkpoint_storage",
                    "cloud", "price_usd_per_hour", "price_date", "price_source"}
                   | {"instance", "gpu", "fits": false, "why", "cloud", "price_..."}, ...]}

Money stays per million tokens and time in hours, as costs/cost.py defines them; the pages convert
to dollars per billion tokens and days where they print.

validate output (issue 4) is read as

    {"records": [{"id", "predicted": {"peak_mem_gib", "step_time_s", "tokens_per_s_per_gpu",
                  "mfu"}, "measured"?: {same keys}, "gpu"?, "source_key"?, "error": {...},
                  "skipped_reason": str | null}], "summary": {...}}

The validate error drawn is always predicted / measured - 1, recomputed from the two values.
Where a record has no `measured`, it is taken from `dataset` (the trainplan-validation/1 file) by
id; where neither has it, from `error` read as that same ratio.
"""

from __future__ import annotations

from dataclasses import dataclass

from trainplan.validation.errors import percentile


def _num(x):
    return float(x) if isinstance(x, (int, float)) and not isinstance(x, bool) else None


def _text(x) -> str | None:
    return x if isinstance(x, str) and x else None


def quantile(vals, q: float) -> float:
    """Quantile of unsorted values: the validation's own percentile (the same numbers `validate` prints)."""
    return percentile(sorted(vals), q)


@dataclass(frozen=True)
class CompareRow:
    instance: str
    gpu: str
    nodes: int | None
    tokens_per_s: float | None
    usd_per_million_tokens: float | None
    hours_to_tokens: float | None
    note: str
    layout: str = ""
    micro_batch: int | None = None
    longest_seq_len: int | None = None
    mfu: float | None = None
    tokens_per_s_per_gpu: float | None = None
    choice: str = ""  # cheapest / fastest (no deadline or budget), chosen (commands/compare.py)
    meets: bool | None = None  # the chosen plan meets the deadline and budget
    miss: str = ""  # by how much it misses them
    cloud: str | None = None  # aws | gcp | azure (hardware/types.py CLOUDS); None: not rented
    price_usd_per_hour: float | None = None  # per node, as the catalog (or the user) gives it
    price_kind: str = ""
    price_date: str | None = None
    price_source: str | None = None
    goodput: float | None = None  # of the plan, checkpoints to `checkpoint_storage` (costs/goodput.py)
    checkpoint_storage: str | None = None

    @property
    def label(self) -> str:
        """The instance, with which of its plans this is when compare shows two (cheapest, fastest)."""
        name = self.instance.removeprefix("ml.")
        return f"{name} ({self.choice})" if self.choice in ("cheapest", "fastest") else name


def _gpu_of(instance: str) -> str:
    from trainplan.errors import TrainplanError
    from trainplan.hardware import find_node

    try:
        return find_node(instance).gpu.name
    except TrainplanError:
        return "?"


def compare_rows(result: dict) -> list[CompareRow]:
    from trainplan.errors import TrainplanError

    raw = result.get("instances") if isinstance(result, dict) else None
    if not isinstance(raw, list):
        raise TrainplanError("compare report: expected `trainplan compare --json` output with an "
                             "'instances' list")
    out = []
    for r in raw:
        inst = str(r.get("instance", "?"))
        out.append(CompareRow(
            instance=inst, gpu=str(r.get("gpu") or _gpu_of(inst)),
            nodes=r.get("nodes") if isinstance(r.get("nodes"), int) else None,
            tokens_per_s=_num(r.get("tokens_per_s")), usd_per_million_tokens=_num(r.get("usd_per_million_tokens")),
            hours_to_tokens=_num(r.get("hours_to_tokens")), note=str(r.get("why") or ""),
            layout=str(r.get("layout") or ""),
            micro_batch=r.get("micro_batch") if isinstance(r.get("micro_batch"), int) else None,
            longest_seq_len=r.get("longest_seq_len"), mfu=_num(r.get("mfu")),
            tokens_per_s_per_gpu=_num(r.get("tokens_per_s_per_gpu")), choice=str(r.get("choice") or ""),
            meets=r.get("meets") if isinstance(r.get("meets"), bool) else None, miss=str(r.get("miss") or ""),
            cloud=_text(r.get("cloud")), price_usd_per_hour=_num(r.get("price_usd_per_hour")),
            price_kind=str(r.get("price_kind") or ""), price_date=_text(r.get("price_date")),
            price_source=_text(r.get("price_source")), goodput=_num(r.get("goodput")),
            checkpoint_storage=_text(r.get("checkpoint_storage"))))
    return out


@dataclass(frozen=True)
class Metric:
    key: str
    label: str
    unit: str
    log: bool


METRICS = (
    Metric("tokens_per_s_per_gpu", "tokens/s per GPU", "tokens/s", True),
    Metric("step_time_s", "step time", "s", True),
    Metric("peak_mem_gib", "peak memory per GPU", "GiB", False),
    Metric("mfu", "MFU", "fraction of dense peak", False),
)


@dataclass(frozen=True)
class Point:
    record: str
    metric: str
    predicted: float
    measured: float
    gpu: str
    source: str

    @property
    def error(self) -> float:
        return self.predicted / self.measured - 1


def validate_points(result: dict, dataset: dict | None = None) -> tuple[list[Point], list[list[str]]]:
    """The drawable (record, metric) pairs, and [id, reason] for every record with none: not
    predicted (the command's skipped_reason), or predicted with nothing measured to compare."""
    from trainplan.errors import TrainplanError

    if not isinstance(result, dict) or not isinstance(result.get("records"), list):
        raise TrainplanError("validate report: expected `trainplan validate --json` output with a "
                             "'records' list")
    by_id = {r.get("id"): r for r in (dataset or {}).get("records", []) if isinstance(r, dict)}
    pts: list[Point] = []
    skipped: list[list[str]] = []
    for rec in result["records"]:
        rid = str(rec.get("id", "?"))
        if rec.get("skipped_reason") or not isinstance(rec.get("predicted"), dict):
            skipped.append([rid, str(rec.get("skipped_reason") or "no prediction")])
            continue
        ds = by_id.get(rec.get("id"), {})
        gpu = str(rec.get("gpu") or (rec.get("hardware") or {}).get("gpu")
                  or (ds.get("hardware") or {}).get("gpu") or "?")
        source = str(rec.get("source_key") or ds.get("source_key") or "")
        measured = rec.get("measured") if isinstance(rec.get("measured"), dict) else ds.get("measured") or {}
        errors = rec.get("error") if isinstance(rec.get("error"), dict) else {}
        before = len(pts)
        for m in METRICS:
            pred = _num(rec["predicted"].get(m.key))
            meas = _num(measured.get(m.key))
            if meas is None and pred is not None and _num(errors.get(m.key)) is not None:
                meas = pred / (1 + errors[m.key]) if errors[m.key] != -1 else None
            if pred is not None and meas is not None and pred > 0 and meas > 0:
                pts.append(Point(rid, m.key, pred, meas, gpu, source))
        if len(pts) == before:
            skipped.append([rid, "predicted, but no measured value of these metrics to compare with"])
    return pts, skipped
