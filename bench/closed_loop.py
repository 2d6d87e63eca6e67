"""The closed loop, measured (issue #22 item 6): how good are the predictions after k runs on my cluster?

    .venv/bin/python bench/closed_loop.py [--json | --write]

On the dev records (`trainplan validate`'s packaged dataset, validation/dataset.DEV_DATASET), each
group of records of one source on one GPU type stands for a team's cluster: k of its records are
taken as the team's own ingested runs (calibration/runs.from_record), calibrated on exactly as
`trainplan calibrate --runs` calibrates run directories (calibration/runs.calibrate, every refusal
included), and the group's other records are predicted with the result. A group is a source and a
GPU, not a source alone, because calibrate fits one GPU type at a time and refuses a mix.

Start ("before"): the shipped profile fitted without the group's source (Profile.fold), the profile a
team whose runs the shipped profile has never seen starts from; a source the shipped fit did not use
gets the shipped profile itself. The full shipped profile was fitted on these very records, so its
error on them would be in-sample.

After: the calibrated profile, or the start profile where calibrate refuses (fewer than MIN_RUNS runs,
a coefficient driven to its bound, a fit worse than the start on the runs it left out): what the
team would then plan with. The refusals are counted by kind, and `when_calibrated` repeats the
tables on the choices calibrate accepted only (does an accepted calibration help?).

Which k runs: every choice of k when there are at most CAP, else CAP distinct choices drawn with
random.Random(f'{SEED}/{n}/{k}') from the group's n records sorted by id. Each held-out record's error is its mean
absolute error over the choices that held it out; the tables are the median and p90 (validate's
percentiles, validation/errors.stats) over records, per group and pooled. A group of k or fewer
records is skipped for that k, named in the result; pooled tables of different k therefore hold
different records, so `same_groups` repeats them on the groups that have more than max(KS) records. Metrics: tokens/s per GPU, and step time and
peak memory where the records measured them (calibrate moves step-time coefficients only, so memory
cannot change: it is there to show that).

This is evidence, not fitting: nothing in src/ is tuned from it.
"""

from __future__ import annotations

import json
import math
import random
import statistics
import sys
from collections.abc import Callable
from itertools import combinations
from pathlib import Path

import _stamp

from trainplan.calibration.runs import calibrate, from_record
from trainplan.errors import TrainplanError
from trainplan.profile import Profile, default_profile
from trainplan.validation.dataset import DEV_DATASET, load_dataset
from trainplan.validation.errors import rel_error, stats
from trainplan.validation.run import predict_case

OUT = Path(__file__).resolve().parent / "results" / "closed_loop.json"
KS = (1, 3, 5)
CAP = 100  # choices of k runs per group and k
SEED = 22
METRICS = ("tokens_per_s_per_gpu", "step_time_s", "peak_mem_gib")
# calibrate's refusals (calibration/runs.py), by the words of their one-line message
REFUSALS = {"move no coefficient": "no coefficient has the evidence", "drives": "a coefficient at its bound",
            "runs it has not seen": "worse than the start on the runs it left out"}


def groups(cases) -> tuple[dict[str, list], list[str]]:
    """'source/gpu' -> its records that can stand for a run (sorted by id); and why the others cannot."""
    out: dict[str, list] = {}
    left = []
    for c in cases:
        try:
            from_record(c)
        except TrainplanError as e:
            left.append(str(e))
            continue
        out.setdefault(f"{c.source_key}/{c.job.cluster.gpu.name}", []).append(c)
    return {g: sorted(cs, key=lambda c: c.id) for g, cs in sorted(out.items())}, left


def choices(n: int, k: int, cap: int = CAP, seed: int = SEED) -> list[tuple[int, ...]]:
    """Which k of n records are the runs: all of them when there are at most `cap`, else `cap` seeded draws."""
    if math.comb(n, k) <= cap:
        return list(combinations(range(n), k))
    rng, seen = random.Random(f"{seed}/{n}/{k}"), set()
    while len(seen) < cap:
        seen.add(tuple(sorted(rng.sample(range(n), k))))
    return sorted(seen)


def errors(case, prof: Profile) -> dict[str, float | None]:
    """(predicted - measured) / measured of each metric the record measured (None where it did not)."""
    pred = predict_case(case, prof, cross_validated=False)
    return {m: rel_error(pred[m], case.measured.get(m)) for m in METRICS}


def _refusal(msg: str) -> str:
    return next((kind for words, kind in REFUSALS.items() if words in msg), msg)


def _table(per_record: dict[str, dict[str, dict[str, list[float]]]]) -> dict:
    """Per metric: median and p90 over records of each record's mean |error|, before and after."""
    out = {}
    for m in METRICS:
        row = {}
        for when in ("before", "after"):
            errs = [statistics.fmean(v[m][when]) for v in per_record.values() if v[m][when]]
            s = stats(errs)
            row[when] = {k: s[k] for k in ("count", "median_abs", "p90_abs") if k in s}
        if row["before"]["count"]:
            out[m] = row
    return out


def _add(per_record: dict, case, before: dict, after: dict) -> None:
    rec = per_record.setdefault(case.id, {m: {"before": [], "after": []} for m in METRICS})
    for m in METRICS:
        if before[m] is not None:
            rec[m]["before"].append(abs(before[m]))
            rec[m]["after"].append(abs(after[m]))


def _group(cs: list, k: int, start: Profile, cap: int, seed: int, before_cache: dict) -> dict:
    """Every choice of k runs of one group: calibrate on them, predict the others before and after."""
    every: dict[str, dict] = {}  # record id -> metric -> errors over the choices that held it out
    accepted: dict[str, dict] = {}  # the same over the choices calibrate accepted
    draws, outcomes = [], {}
    for pick in choices(len(cs), k, cap, seed):
        runs = [cs[i] for i in pick]
        try:
            prof = calibrate([from_record(c) for c in runs], start, name=f"closed-loop k={k}")
            outcome, moved = "calibrated", list(prof.meta["fitted"])
        except TrainplanError as e:
            prof, outcome, moved = start, _refusal(str(e)), []
        draws.append({"runs": " ".join(c.id for c in runs), "outcome": outcome, "moved": " ".join(moved)})
        outcomes[outcome] = outcomes.get(outcome, 0) + 1
        for i, c in enumerate(cs):
            if i in pick:
                continue
            if c.id not in before_cache:
                before_cache[c.id] = errors(c, start)
            after = before_cache[c.id] if prof is start else errors(c, prof)
            _add(every, c, before_cache[c.id], after)
            if prof is not start:
                _add(accepted, c, before_cache[c.id], after)
    return {"every": every, "accepted": accepted, "draws": draws, "outcomes": outcomes}


def closed_loop(cases, start_for: Callable[[str], Profile], ks=KS, cap: int = CAP, seed: int = SEED,
                progress: Callable[[str], None] | None = None) -> dict:
    """The benchmark on validation Cases; `start_for(source_key)` is the profile a group starts from.

    Per k: `pooled` (every choice; a refusal predicts with the start profile), `when_calibrated` (only
    the choices calibrate accepted, each record over those), the outcomes, the skipped groups, and
    each group's tables and choices; `same_groups`: the pooled table of each k on the same records."""
    by_group, left = groups(cases)
    result = {"groups": {g: [c.id for c in cs] for g, cs in by_group.items()}, "not_runs": left, "by_k": {}}
    before_cache: dict[str, dict] = {}
    kept: dict[int, dict[str, dict]] = {}  # k -> record id -> errors, for the same-groups table
    for k in ks:
        every, accepted, per_group, skipped, outcomes = {}, {}, {}, {}, {}
        for g, cs in by_group.items():
            if len(cs) <= k:
                skipped[g] = f"{len(cs)} record(s), needs more than {k}"
                continue
            start = start_for(cs[0].source_key)
            r = _group(cs, k, start, cap, seed, before_cache)
            every |= r["every"]
            accepted |= r["accepted"]
            for o, n in r["outcomes"].items():
                outcomes[o] = outcomes.get(o, 0) + n
            per_group[g] = {"records": len(cs), "choices": len(r["draws"]), "start": start.name,
                            # signed: an offset shared by the group is what a residual can fix
                            "start_tokens_per_s_error": {c.id: round(before_cache[c.id]["tokens_per_s_per_gpu"], 4)
                                                         for c in cs if c.id in before_cache},
                            "table": _table(r["every"]), "when_calibrated": _table(r["accepted"]),
                            "outcomes": r["outcomes"], "draws": r["draws"]}
            if progress:
                tps = per_group[g]["table"]["tokens_per_s_per_gpu"]
                progress(f"k={k} {g}: {len(r['draws'])} choices, tokens/s median {tps['before']['median_abs']:.1%} -> "
                         f"{tps['after']['median_abs']:.1%}")
        kept[k] = every
        result["by_k"][str(k)] = {"pooled": _table(every), "when_calibrated": _table(accepted), "outcomes": outcomes,
                                  "skipped": skipped, "groups": per_group}
    # the same records for every k: those of the groups with more than max(ks) records
    common = sorted(g for g, cs in by_group.items() if len(cs) > max(ks))
    ids = {c.id for g in common for c in by_group[g]}
    result["same_groups"] = {"groups": common, "by_k": {
        str(k): _table({i: v for i, v in kept[k].items() if i in ids}) for k in ks}}
    return result


def main(argv: list[str]) -> int:
    _, cases = load_dataset(DEV_DATASET)
    shipped = default_profile()
    res = closed_loop(cases, shipped.fold, progress=lambda s: print(s, file=sys.stderr))
    out = {"what": "error on a group's other records before (shipped profile without the group's source) and "
                   "after `trainplan calibrate` on k of its records (the start profile where calibrate refuses)",
           "dataset": str(DEV_DATASET.relative_to(Path(__file__).resolve().parent.parent / "src")),
           "profile": shipped.name, "ks": list(KS), "cap": CAP, "seed": SEED,
           "choice": f"every choice of k records when there are at most {CAP}, else {CAP} distinct draws of "
                     f"random.Random('{SEED}/n/k') over the group's records sorted by id",
           "averaging": "each held-out record's mean |error| over the choices that held it out; median and p90 "
                        "(linear interpolation, validation/errors.stats) over records",
           **res}
    if "--write" in argv:
        _stamp.write(OUT, out, __file__)
        print(f"wrote {OUT}")
    if "--json" in argv:
        print(json.dumps(out, indent=1))
    if "--write" not in argv and "--json" not in argv:
        for k, r in out["by_k"].items():
            _print(f"k={k}", r["pooled"])
            _print(f"k={k} calibrated only", r["when_calibrated"])
            print(f"k={k} outcomes {r['outcomes']}; skipped {len(r['skipped'])} groups")
        for k, table in out["same_groups"]["by_k"].items():
            _print(f"same groups k={k}", table)
    return 0


def _print(head: str, table: dict) -> None:
    for m, row in table.items():
        b, a = row["before"], row["after"]
        print(f"{head} {m:<22} records {b['count']:>3}  median {b['median_abs']:.1%} -> {a['median_abs']:.1%}"
              f"  p90 {b['p90_abs']:.1%} -> {a['p90_abs']:.1%}")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
