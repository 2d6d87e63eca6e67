"""The terminal rendering of a plan (report/summary.plan_lines): every runner-up and Pareto layout
printed whole, so two plans that differ only at the end of their layout never read the same, and a
sequence column wherever the plans listed differ in sequence length (the context priority)."""

from __future__ import annotations

import dataclasses

from report_samples import plan

from trainplan.estimate import estimate
from trainplan.plan import Alternative
from trainplan.report.summary import plan_lines


def _table(lines: list[str], title: str) -> list[str]:
    """The lines of the table printed under `title` (up to the next line that is not a table's)."""
    text = "\n".join(lines).split(title, 1)[1].splitlines()[1:]
    end = next((i for i, line in enumerate(text) if line.endswith(":") or line.startswith("searched")),
               len(text))
    return text[:end]


def _rows(table: list[str]) -> dict[str, list[str]]:
    """label -> the row's words but its three numbers (tokens/s, GiB, net/tok), continuation lines
    (those that start with a space) joined to the row they continue."""
    rows: dict[str, list[str]] = {}
    for line in table[2:]:
        if line.startswith(" "):
            rows[next(reversed(rows))] += line.split()
        else:
            label, *words = line.split()
            rows[label] = words[:-3]
    return rows


def test_every_runner_up_and_pareto_layout_is_printed_whole_within_80_columns():
    p = plan()
    lines = plan_lines(p)
    for title, alts in (("runners-up:", (p, *p.runners_up)), ("Pareto set", p.pareto)):
        table = _table(lines, title)
        assert max(len(line) for line in table) <= 80
        assert sorted(" ".join(words) for words in _rows(table).values()) == \
            sorted(a.layout.short() for a in alts)


def test_a_sequence_column_appears_in_both_tables_when_the_plans_differ_in_sequence():
    p = plan()
    assert not any(line.split()[:2] == ["plan", "seq"] for line in plan_lines(p))  # one sequence: no column
    other = p.pareto[-1]
    job = dataclasses.replace(other.job, workload=dataclasses.replace(other.job.workload, seq_len=4096))
    p = dataclasses.replace(p, pareto=(*p.pareto[:-1], Alternative(job, other.layout, estimate(job, other.layout))))
    lines = plan_lines(p)
    seqs = {}
    for title in ("runners-up:", "Pareto set"):
        table = _table(lines, title)
        assert table[0].split()[:2] == ["plan", "seq"]
        seqs.update({label: words[0] for label, words in _rows(table).items()})
    assert seqs["chosen"] == "8192" and seqs["P3"] == "4096"
