"""Failure rates, restart time and checkpoint storage (reliability.toml), read once and converted
to SI units here: failures per GPU-second, bytes per second, seconds."""

from __future__ import annotations

import functools
from dataclasses import dataclass, replace
from pathlib import Path

from trainplan.errors import TrainplanError, unknown
from trainplan.parsing import check_keys, read_toml

_FILE = Path(__file__).parent / "reliability.toml"
_HOUR = 3600.0


@dataclass(frozen=True, slots=True)
class FailureRate:
    name: str
    per_gpu_s: float  # unexpected interruptions per GPU-second
    source: str

    @property
    def per_gpu_hour(self) -> float:
        return self.per_gpu_s * _HOUR


@dataclass(frozen=True, slots=True)
class Storage:
    name: str
    display: str
    bytes_per_s_per_tib: float
    capacity_tib: float
    source: str
    capacity_source: str

    @property
    def bytes_per_s(self) -> float:
        """Aggregate read or write throughput of the provisioned file system."""
        return self.bytes_per_s_per_tib * self.capacity_tib

    def with_capacity(self, tib: float) -> Storage:
        return replace(self, capacity_tib=float(tib), capacity_source="given")


@dataclass(frozen=True, slots=True)
class Reliability:
    """What goodput needs besides the plan: failure rate, restart time and storage."""

    failures: FailureRate
    storage: Storage
    restart_s: float
    restart_source: str


@functools.lru_cache(maxsize=1)
def _data() -> dict:
    d = read_toml(_FILE)
    check_keys(d, {"failures", "defaults", "storage"}, "reliability.toml")
    return d


def failure_rates() -> dict[str, FailureRate]:
    out = {}
    for name, f in _data()["failures"].items():
        check_keys(f, {"interruptions", "days", "gpus", "gpu", "source"}, f"reliability.toml [failures.{name}]")
        out[name] = FailureRate(name, f["interruptions"] / (f["days"] * 24 * _HOUR * f["gpus"]), f["source"])
    return out


def storages() -> dict[str, Storage]:
    out = {}
    for name, s in _data()["storage"].items():
        keys = {"display", "mb_s_per_tib", "capacity_tib", "source", "capacity_source"}
        check_keys(s, keys, f"reliability.toml [storage.{name}]", required=keys)
        out[name] = Storage(name, s["display"], s["mb_s_per_tib"] * 1e6, float(s["capacity_tib"]), s["source"],
                            s["capacity_source"])
    return out


@functools.lru_cache(maxsize=64)
def reliability(storage: str | None = None, capacity_tib: float | None = None,
                failures: str | None = None) -> Reliability:
    """The defaults of reliability.toml, with a storage, its capacity or a failure rate chosen by name."""
    d = _data()["defaults"]
    rates, stores = failure_rates(), storages()
    fname, sname = failures or d["failures"], storage or d["storage"]
    if fname not in rates:
        raise unknown("failure rate", fname, rates)
    if sname not in stores:
        raise unknown("storage", sname, stores)
    st = stores[sname]
    if capacity_tib is not None:
        if not capacity_tib > 0:
            raise TrainplanError(f"storage capacity must be > 0 TiB, got {capacity_tib}")
        st = st.with_capacity(capacity_tib)
    return Reliability(rates[fname], st, float(d["restart_s"]), d["restart_source"])
