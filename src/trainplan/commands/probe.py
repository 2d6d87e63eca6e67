"""`trainplan probe`: measure this machine's kernels (and, under torchrun, its collectives) and write
a machine profile (trainplan-machine/1) that plan, estimate, compare and validate read with --machine.

    trainplan probe --out machine.json                      # one GPU: kernels
    torchrun --nproc-per-node 8 -m trainplan probe --out m.json   # + NVLink collectives
"""

from __future__ import annotations

NAME = "probe"
HELP = "Measure GEMM, attention, element-wise and collective rates here; write a machine profile (needs torch)."


def add_arguments(p) -> None:
    from trainplan.commands._fields import add_fields
    from trainplan.job import Job
    from trainplan.parsing import output_file

    p.add_argument("--out", type=output_file, default="machine.json", help="where to write the profile")
    p.add_argument("--quick", action="store_true", help="a coarser grid (about 3 minutes on one GPU)")
    p.add_argument("--device", choices=("cuda", "cpu"), default="cuda",
                   help="cpu: a tiny grid of the same code, seconds (for CI and a dry run)")
    p.add_argument("--gpu", default=None,
                   help="the hardware catalog GPU this profile is for (default: detected; a CPU probe has none)")
    add_fields(p, Job, ("cluster",), variants={"cluster": "probe"})
    p.add_argument("--json", action="store_true", help="also print the profile written to --out as JSON")


def run(args) -> int:
    import json
    import sys

    from trainplan.commands._common import print_json
    from trainplan.errors import TrainplanError
    from trainplan.fileio import write_atomic

    try:
        from trainplan.probe.run import measure, steps
    except ImportError as e:
        raise TrainplanError(f"trainplan probe needs torch ({e}); install the runtime extra") from None
    from trainplan.probe.network import world
    from trainplan.report.progress import Progress

    rank = world()[0]
    with Progress(total=steps(args.device, args.quick), label="probe", unit="kernel",
                  enabled=None if rank == 0 else False) as bar:
        d = measure(args.device, args.quick, args.gpu, args.instance, step=lambda note: bar.update(1, note=note))
    if rank == 0:
        write_atomic(args.out, json.dumps(d, indent=1) + "\n")
        print(f"wrote {args.out}: {len(d['tables'])} tables for {d['gpu']}", file=sys.stderr)
        if args.json:
            print_json(d)
    return 0
