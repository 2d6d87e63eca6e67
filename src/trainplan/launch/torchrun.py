"""The torchrun command line every target runs: `torchrun <rdzv args> -m trainplan.runtime --plan P`.

torchrun flags as documented in https://pytorch.org/docs/stable/elastic/run.html (the dashed
spellings are accepted since PyTorch 2.0). Multi-node runs use the c10d rendezvous: the TCP store
lives on the node whose address is the endpoint, and every node joins with the same --rdzv-id.
"""

from __future__ import annotations

from trainplan.launch.base import PROBE_FILE, RUNTIME_MODULE


def runtime_args(plan_path: str, *, steps: int | None, out_dir: str, checkpoint_dir: str,
                 fit_world: bool = False, data: tuple[str, ...] = (), device: str = "cuda") -> list[str]:
    """The trainer's own arguments (trainplan.runtime's documented entry point)."""
    args = ["--plan", plan_path]
    if data:
        args += ["--data", ",".join(data)]  # the runtime reads comma-separated files/directories
    if steps is not None:
        args += ["--steps", str(steps)]
    if out_dir:
        args += ["--out", out_dir]
    if checkpoint_dir:
        args += ["--checkpoint-dir", checkpoint_dir]
    if device == "cpu":  # a plan runs on CPU only when asked: the runtime refuses it otherwise
        args += ["--device", "cpu"]
    if fit_world:
        args.append("--fit-world")
    return args


def standalone(nproc_per_node: int) -> list[str]:
    """One node: torchrun starts its own local rendezvous on a free port."""
    return ["torchrun", "--standalone", "--nnodes", "1", "--nproc-per-node", str(nproc_per_node)]


def c10d(nnodes: int, nproc_per_node: int, endpoint: str, rdzv_id: str,
         node_rank: str | int | None = None) -> list[str]:
    """Several nodes meeting at `endpoint` (host:port of the first node)."""
    argv = ["torchrun", "--nnodes", str(nnodes), "--nproc-per-node", str(nproc_per_node)]
    if node_rank is not None:
        argv += ["--node-rank", str(node_rank)]
    return argv + ["--rdzv-backend", "c10d", "--rdzv-endpoint", endpoint, "--rdzv-id", rdzv_id]


def module() -> list[str]:
    return ["-m", RUNTIME_MODULE]


def static(nnodes: int, nproc_per_node: int, node_rank: int, master_addr: str, master_port: int) -> list[str]:
    """Several nodes whose ranks and first node are known up front (SageMaker: SM_CURRENT_HOST_RANK,
    SM_MASTER_ADDR): torchrun's static rendezvous, as the SageMaker SDK's own driver uses."""
    return ["torchrun", "--nnodes", str(nnodes), "--nproc-per-node", str(nproc_per_node),
            "--node-rank", str(node_rank), "--master-addr", master_addr, "--master-port", str(master_port)]


def probe(out_dir: str, instance: str) -> list[str]:
    """`launch --probe`: the microbenchmarks instead of the trainer (docs/machine-profile.md); rank 0
    writes the machine profile to OUT/machine.json, the network tables naming the instance."""
    return ["-m", "trainplan", "probe", "--quick", "--out", f"{out_dir}/{PROBE_FILE}", "--instance", instance]


def entry(options, plan_path: str, instance: str, *, out_dir: str, checkpoint_dir: str, fit_world: bool = False,
          data: tuple[str, ...] = (), device: str = "cuda") -> list[str]:
    """What torchrun runs after its own flags: the trainer, or the probe with options.probe."""
    if options.probe:
        return probe(out_dir, instance)
    return module() + runtime_args(plan_path, steps=options.steps, out_dir=out_dir, checkpoint_dir=checkpoint_dir,
                                   fit_world=fit_world, data=data, device=device)


def probe_note(out_dir: str) -> str:
    return f"probe: rank 0 writes the machine profile to {out_dir}/{PROBE_FILE}; use it with --machine"

