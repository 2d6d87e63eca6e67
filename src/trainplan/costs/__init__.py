"""Cost models of one layout: memory (memory.py, fit.py), FLOPs, communication and step time.

Pure functions of values (Job, Layout) returning named breakdowns; no I/O, no torch.
"""

from trainplan.costs.fit import fits, headroom, max_micro_batch, max_seq_len
from trainplan.costs.memory import MemoryBreakdown, memory_breakdown

__all__ = ["MemoryBreakdown", "fits", "headroom", "max_micro_batch", "max_seq_len", "memory_breakdown"]
