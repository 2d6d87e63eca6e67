"""`trainplan probe`: microbenchmarks of the machine it runs on (torch), written as a machine profile
(trainplan-machine/1, trainplan/machine). kernels.py times one kernel, grids.py says which shapes,
network.py times collectives across torchrun ranks, run.py assembles the profile."""

from trainplan.torch_logs import quiet_torch_imports

quiet_torch_imports()  # before this package imports torch: the import noise of torchao (torch_logs.py)
