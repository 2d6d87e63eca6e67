"""The first process of a SageMaker training job that `launch sagemaker` rendered (container side).

sm_train.sh (the SDK's) prepares the environment and installs the requirements, then execs
`python3 trainplan_entry.py`, which calls main() here. Why this and not the SDK's torchrun driver:
see launch/sagemaker.py. What it does:

1. reads the job's hyperparameters (SM_HPS, JSON) and hosts (SM_HOST_COUNT, SM_CURRENT_HOST_RANK,
   SM_MASTER_ADDR, SM_MASTER_PORT; sagemaker 3.27 container_drivers/scripts/environment.py);
2. runs `torchrun ... -m trainplan.runtime` (or, for a plan on a framework's stack, the framework's
   entry and arguments read from the shipped framework_entry.json) under launch/supervise.py, which passes SIGTERM (stop,
   spot interruption) to torchrun and from there to the ranks, which save and exit;
3. exits with torchrun's status, writing /opt/ml/output/failure when it is not 0 (the SDK's
   sm_train.sh did so before the exec replaced it).
"""

from __future__ import annotations

import json
import os
import signal
import string
import sys

from trainplan.launch import supervise, torchrun
from trainplan.launch.base import RUNTIME_MODULE

# Hyperparameters this entry reads (launch/sagemaker.py writes them) and the runtime flag of each.
RUNTIME_FLAGS = {"plan": "--plan", "out": "--out", "checkpoint-dir": "--checkpoint-dir", "steps": "--steps",
                 "data": "--data", "fit-world": "--fit-world", "device": "--device"}
TORCHRUN_KEYS = ("nproc-per-node",)
PROBE_KEYS = ("probe", "instance")  # launch sagemaker --probe: the microbenchmarks instead of the trainer
# A plan on a framework's stack: a JSON file in the code directory whose "entry" is what torchrun
# runs (the framework's script or module and its arguments; launch/framework.py).
FRAMEWORK_KEY = "framework-entry"
FAILURE_FILE = "/opt/ml/output/failure"  # SM_OUTPUT_FAILURE's value; the job's failure reason


class EntryError(Exception):
    pass


def command(env: dict[str, str]) -> list[str]:
    """The torchrun command line for this host, from the job's SM_* environment."""
    try:
        hps = json.loads(env["SM_HPS"])
        hosts = int(env.get("SM_HOST_COUNT", "1"))
        rank = int(env.get("SM_CURRENT_HOST_RANK", "0"))
    except (KeyError, ValueError) as e:
        raise EntryError(f"not a SageMaker training container: {e}") from None
    unknown = sorted(set(hps) - set(RUNTIME_FLAGS) - set(TORCHRUN_KEYS) - set(PROBE_KEYS) - {FRAMEWORK_KEY})
    if unknown:
        raise EntryError(f"unknown hyperparameter {unknown[0]!r}; known: {', '.join(sorted(RUNTIME_FLAGS))}, "
                         f"{', '.join(TORCHRUN_KEYS)}")
    # The GPUs the platform sees (environment.py runs nvidia-smi), else the plan's count.
    nproc = int(env.get("SM_NUM_GPUS") or 0) or int(hps.get("nproc-per-node", 1))
    if hosts > 1:
        head = torchrun.static(hosts, nproc, rank, env["SM_MASTER_ADDR"], int(env["SM_MASTER_PORT"]))
    else:
        head = torchrun.standalone(nproc)
    if FRAMEWORK_KEY in hps:
        try:
            with open(str(hps[FRAMEWORK_KEY])) as f:
                # $VARS (the checkout of the framework, MEGATRON_LM) as this container sets them
                return head + [string.Template(str(a)).safe_substitute(env) for a in json.load(f)["entry"]]
        except (OSError, ValueError, KeyError, TypeError) as e:
            raise EntryError(f"cannot read the framework entry {hps[FRAMEWORK_KEY]}: {e}") from None
    if str(hps.get("probe", "")).lower() == "true":
        return head + torchrun.probe(str(hps.get("out", "/opt/ml/model")), str(hps.get("instance", "unnamed")))
    args = []
    for key, flag in RUNTIME_FLAGS.items():
        if key not in hps:
            continue
        value = hps[key]
        if isinstance(value, bool) or str(value).lower() in ("true", "false"):
            if str(value).lower() == "true":
                args.append(flag)
        else:
            args += [flag, str(value)]
    return head + ["-m", RUNTIME_MODULE] + args


def main(env: dict[str, str] | None = None) -> int:
    env = dict(os.environ if env is None else env)
    try:
        argv = command(env)
    except EntryError as e:
        return _fail(f"trainplan entry: {e}", 2)
    if "SM_NETWORK_INTERFACE_NAME" in env:
        # NCCL's bootstrap on the interface SageMaker names (what the SDK's driver set).
        env.setdefault("NCCL_SOCKET_IFNAME", env["SM_NETWORK_INTERFACE_NAME"])
    print(f"trainplan entry: {' '.join(argv)}", flush=True)

    passed: list[str] = []

    def note(signum):
        passed.append(signal.Signals(signum).name)
        print(f"trainplan entry: passing {passed[-1]} to torchrun; the ranks save and stop", flush=True)

    code = supervise.run(argv, env=env, on_signal=note)
    if passed:
        # A stop, not a failure: torchrun exits 1 after any signal it handled (it re-raises it).
        print(f"trainplan entry: stopped by {passed[0]}; torchrun exited with {code}", flush=True)
        return code
    if code != 0:
        return _fail(f"trainplan entry: torchrun exited with {code}; see the job's log for the rank that failed",
                     code)
    return 0


def _fail(message: str, code: int) -> int:
    print(message, file=sys.stderr, flush=True)
    path = os.environ.get("SM_OUTPUT_FAILURE", FAILURE_FILE)
    try:
        if not os.path.exists(path) or os.path.getsize(path) == 0:
            with open(path, "w") as f:
                f.write(message + "\n")
    except OSError:
        pass
    return code


if __name__ == "__main__":
    sys.exit(main())
