"""The README's accuracy table ("How far to trust it"), printed from `trainplan validate`'s own output.

    PYTHONPATH=src .venv/bin/python bench/accuracy_table.py

Leave one source out (LOSO) beside the primary time split (fit on sources published before the date
of validation/data/source_dates.toml, predict those on or after it), then the leave-one-family and
leave-one-generation splits and the band's coverage. Every number is the packaged profile's, as
`trainplan validate --json` reports it (validation/oos.py): paste the output, never edit it by hand.
"""

from __future__ import annotations

from trainplan.profile import default_profile
from trainplan.validation.dataset import DEV_DATASET, load_dataset
from trainplan.validation.holdout import holdout_cases
from trainplan.validation.oos import out_of_sample

ROWS = [  # (label, metric, group key in a split's summary or None for all, value)
    ("tokens/s per GPU, fully specified runs", "tokens_per_s_per_gpu", "by_quality", "full"),
    ("tokens/s per GPU, all runs", "tokens_per_s_per_gpu", None, None),
    ("tokens/s per GPU, dense runs", "tokens_per_s_per_gpu", "by_model", "dense"),
    ("tokens/s per GPU, MoE runs", "tokens_per_s_per_gpu", "by_model", "moe"),
    ("step time", "step_time_s", None, None),
    ("peak memory per GPU (nothing fitted)", "peak_mem_gib", None, None),
]


def _cell(method: dict, metric: str, group: str | None, value: str | None) -> str:
    s = method["summary"][metric]
    st = s["all"] if group is None else s.get(group, {}).get(value, {"count": 0})
    return f"{st['count']} | {st['median_abs']:.1%} | {st['p90_abs']:.1%}" if st["count"] else "0 | - | -"


def table(oos: dict) -> str:
    loso, time = oos["methods"]["loso"], oos["methods"][f"time<{oos['primary']}"]
    out = [f"| metric | LOSO runs | median | p90 | time split (from {oos['primary']}) runs | median | p90 |",
           "|---|---|---|---|---|---|---|"]
    out += [f"| {label} | {_cell(loso, *k)} | {_cell(time, *k)} |" for label, *k in ROWS]
    out += ["", "| tokens/s per GPU, split | runs | median | p90 |", "|---|---|---|---|"]
    for m in oos["methods"].values():
        if m["available"]:
            out.append(f"| {m['description']} | {_cell(m, 'tokens_per_s_per_gpu', None, None)} |")
    cov = oos["coverage"]["all"]
    out += ["", (f"Band coverage: {cov['inside']} of {cov['count']} out-of-sample predictions "
                 f"({cov['share']:.0%}) inside their p90 band (target 90%).")]
    return "\n".join(out)


def main() -> None:
    _, cases = load_dataset(DEV_DATASET)
    print(table(out_of_sample(cases, default_profile(), holdout=holdout_cases())))


if __name__ == "__main__":
    main()
