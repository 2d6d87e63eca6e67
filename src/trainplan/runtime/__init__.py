"""The reference trainer: executes a plan.json with PyTorch (FSDP2, DTensor TP, torchao float8,
activation checkpointing, DCP checkpoints) and records measurements in the planner's units.

Entry point (what launchers render): `torchrun ... -m trainplan.runtime --plan plan.json`.
This package imports torch; the planner core never imports it.
"""

from trainplan.torch_logs import quiet_torch_imports

quiet_torch_imports()  # before this package imports torch: the import noise of torchao (torch_logs.py)
