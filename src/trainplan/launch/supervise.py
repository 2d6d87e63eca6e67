"""Run torchrun under a parent that passes stop signals on: `launch local` and the SageMaker entry.

Why: a parent that dies on SIGTERM leaves torchrun and its ranks running with nobody to stop them
(`launch local` did so), and a parent that ignores SIGTERM (a bash that is the container's first
process, as the SageMaker SDK starts it) keeps the signal from the trainer, which then never saves.
Here torchrun starts in a session of its own, so a Ctrl-C at the terminal reaches this process
only, and every stop signal this process gets is sent to torchrun's process group. torchrun
forwards SIGTERM/SIGINT (and what --signals-to-handle names) to each rank, which saves a checkpoint
at the end of its step and exits; torchrun then exits with the ranks' status, and so do we.

torchrun gives ranks TORCH_ELASTIC_SHUTDOWN_TIMEOUT seconds (default 30, torch >= 2.11) before it
sends SIGKILL; targets set it to the grace their platform allows.
"""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys

# What a person or a platform sends to stop a job: kill/docker stop/SageMaker StopTrainingJob and
# spot interruption (SIGTERM), Ctrl-C (SIGINT), a closed terminal or ssh session (SIGHUP).
FORWARDED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
_PR_SET_PDEATHSIG = 1  # linux/prctl.h


def _die_with_parent() -> None:
    """In the child before exec: if this supervisor is SIGKILLed, torchrun gets SIGTERM instead of
    running on orphaned (Linux only; elsewhere nothing)."""
    if sys.platform.startswith("linux"):
        try:
            ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, int(signal.SIGTERM))
        except (OSError, AttributeError):
            pass


def run(argv: list[str], env: dict[str, str] | None = None, cwd: str | None = None,
        on_signal=None, signals: tuple = FORWARDED, targets=None) -> int:
    """Start `argv` in its own session, pass `signals` to its process group, wait for it.

    Returns its exit status (128 + N when a signal N killed it, as a shell reports it).
    `on_signal(signum)` is called for each signal passed on (for a log line). `targets(pid)`, when
    given, names the processes to signal instead of the child's group (`trainplan train`: the ranks).
    """
    child: list[subprocess.Popen] = []
    early: list[int] = []  # signals that came before the child existed

    def forward(signum, _frame):
        if on_signal is not None:
            on_signal(signum)
        if not child:
            early.append(signum)
            return
        _send(child[0].pid, signum, targets)

    # Handlers first, so no window exists in which a stop kills us and orphans the child.
    previous = {s: signal.signal(s, forward) for s in signals}
    try:
        # preexec_fn is unsafe only with other threads running; the launcher and the entry have none.
        child.append(subprocess.Popen(argv, env=env, cwd=cwd, start_new_session=True,
                                      preexec_fn=_die_with_parent))  # noqa: PLW1509
        for signum in early:
            _send(child[0].pid, signum, targets)
        # Popen.wait retries after each handled signal (PEP 475), so a forwarded signal does not
        # end the wait: we exit when torchrun does, after its ranks saved.
        code = child[0].wait()
    finally:
        for s, h in previous.items():
            signal.signal(s, h)
    if os.getpid() == 1:
        reap_orphans()
    return 128 - code if code < 0 else code


def _send(pid: int, signum: int, targets) -> None:
    try:
        if targets is None:
            os.killpg(pid, signum)
            return
        for target in targets(pid) or [pid]:
            os.kill(target, signum)
    except ProcessLookupError:  # it is exiting already
        pass


def reap_orphans() -> None:
    """As a container's first process, collect the exit status of any orphan handed to us, so no
    zombie outlives the job."""
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
