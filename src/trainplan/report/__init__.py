"""Reports people would rather look at: HTML pages with plots, terminal tables, progress bars.

    from trainplan.report import write_plan_report, write_compare_report, write_validate_report
    write_plan_report("plan.html", plan)                   # a Plan, plan.json or `plan --json` output
    write_compare_report("compare.html", compare_result)   # `trainplan compare --json` output
    write_validate_report("validate.html", validate_result, dataset=None)

    from trainplan.report.terminal import print_table, format_table, use_color, paint
    from trainplan.report.progress import Progress, track

The HTML writers need plotly (extra `report`) and import it on first use, so that importing this
package (for the terminal helpers) costs nothing.
"""

from __future__ import annotations

__all__ = ["write_compare_report", "write_plan_report", "write_validate_report"]


def __getattr__(name: str):
    if name in __all__:
        from trainplan.report import pages

        return getattr(pages, name)
    raise AttributeError(f"module 'trainplan.report' has no attribute {name!r}")
