"""Small machine profiles for the cost tests: a profile from tables, and a flat GEMM table."""

from trainplan.machine.profile import machine_from_dict

GPU = "h100-sxm-80gb"


def machine(*tables, gpu=GPU):
    return machine_from_dict({"schema": "trainplan-machine/1", "name": "test", "gpu": gpu,
                              "provenance": {"kind": "published", "source": "test"}, "tables": list(tables)}, "t")


def flat_gemm(tflops, dtype="bf16"):
    return {"kind": "gemm", "dtype": dtype, "axes": [], "points": [[tflops]], "source": "a flat test table"}
