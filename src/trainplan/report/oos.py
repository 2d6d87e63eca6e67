"""The out-of-sample part of `trainplan validate` (validation/oos.py) as rows: each split's tokens/s
errors per group, and the band's coverage. Terminal (summary.validate_text) and HTML (pages) draw
the same rows."""

from __future__ import annotations

ERROR_HEAD = ["split", "group", "n", "median", "p90", "max", "mean"]
COVERAGE_HEAD = ["group", "runs", "inside", "share"]
_GROUPS = ("by_generation", "by_model", "by_scale", "by_quality", "by_stack", "by_family")


def split_rows(oos: dict, metric: str = "tokens_per_s_per_gpu") -> list[list]:
    """One row per split and group: n, median, p90, max |error| and mean signed error."""
    rows = []
    for name, m in oos["methods"].items():
        if not m["available"]:
            rows.append([name, "not available", 0, "-", "-", "-", "-"])
            continue
        entry = m["summary"][metric]
        groups = [("all", entry["all"])]
        for g in _GROUPS:
            groups += [(f"{g[3:]}={k}", v) for k, v in entry.get(g, {}).items()]
        rows += [[name, group, st["count"], f"{st['median_abs']:.1%}", f"{st['p90_abs']:.1%}", f"{st['max_abs']:.1%}",
                  f"{st['mean_signed']:+.1%}"] for group, st in groups if st["count"]]
    return rows


def coverage_rows(oos: dict) -> list[list]:
    cov = oos.get("coverage")
    if not cov:
        return []
    rows = [["all", cov["all"]["count"], cov["all"]["inside"], f"{cov['all']['share']:.0%}"]]
    for key in ("by_method", "by_generation", "by_model", "by_scale", "by_stack", "by_quality"):
        rows += [[f"{key[3:]}={k}", v["count"], v["inside"], f"{v['share']:.0%}"] for k, v in cov[key].items()]
    return rows


def header(oos: dict) -> list[str]:
    """The lines above the tables: the splits, their dates, what the band is and its coverage."""
    lines = [f"Out of sample: time split at {', '.join(oos['split_dates'])} (primary {oos['primary']}; sources "
             "dated in trainplan/validation/data/source_dates.toml); " +
             "; ".join(f"{k}: {m['description']}" for k, m in oos["methods"].items() if not k.startswith("time"))]
    if oos["undated_sources"]:
        lines.append(f"undated sources (in no time split): {', '.join(oos['undated_sources'])}")
    band, cov = oos["band"], oos.get("coverage")
    if cov:
        lines.append(f"band coverage: {cov['all']['share']:.0%} of {cov['all']['count']} out-of-sample predictions "
                     f"({', '.join(band['methods'])}) inside their p90 band (target {cov['target']:.0%}); each band from "
                     f"the nearest group of >= {band['min_runs']} runs of the other sources")
    return lines
