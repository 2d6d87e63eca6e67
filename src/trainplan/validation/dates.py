"""When each source made its measurements public (data/source_dates.toml), for the time split.

A record's date is its own `published` field when it has one (ISO "YYYY-MM-DD" or "YYYY-MM"), else
its source's in the packaged table; a record with neither is undated: it is never fitted on by a
time split and never counted as predicted by one (the validate output lists those sources).
"""

from __future__ import annotations

import datetime
import functools
from dataclasses import dataclass
from pathlib import Path

from trainplan.errors import TrainplanError
from trainplan.parsing import read_toml

SOURCE_DATES = Path(__file__).parent / "data" / "source_dates.toml"


def parse_date(text, where: str) -> datetime.date:
    """'2025-06-16' or '2025-06' (the 1st of the month) as a date; anything else is refused."""
    if isinstance(text, str):
        for fmt in ("%Y-%m-%d", "%Y-%m"):
            try:
                return datetime.datetime.strptime(text, fmt).date()
            except ValueError:
                pass
    raise TrainplanError(f"{where}: a date must be text YYYY-MM-DD or YYYY-MM, got {text!r}")


@dataclass(frozen=True, slots=True)
class SourceDates:
    published: dict  # source_key -> datetime.date
    basis: dict  # source_key -> where the date comes from
    split_dates: tuple  # datetime.date, ascending
    primary: datetime.date  # the split the fitted coefficients are judged on

    def of(self, record: dict) -> datetime.date | None:
        """The date a record's measurement was published, or None (undated)."""
        if record.get("published") is not None:
            return parse_date(record["published"], f"record {record.get('id', '?')}: published")
        return self.published.get(record.get("source_key", ""))


@functools.cache
def source_dates(path: Path = SOURCE_DATES) -> SourceDates:
    d = read_toml(path)
    published, basis = {}, {}
    for key, s in d.get("sources", {}).items():
        if not isinstance(s, dict) or not s.get("basis"):
            raise TrainplanError(f"{path}: source {key} needs a published date and its basis")
        published[key] = parse_date(s.get("published"), f"{path}: sources.{key}.published")
        basis[key] = s["basis"]
    splits = tuple(sorted(parse_date(x, f"{path}: split_dates") for x in d["split_dates"]))
    primary = parse_date(d["primary"], f"{path}: primary")
    if primary not in splits:
        raise TrainplanError(f"{path}: primary {primary} is not one of split_dates")
    return SourceDates(published, basis, splits, primary)
