"""Stop signals in a rank: save at the end of the current step, then exit 0, with no traceback.

SIGTERM: a spot interruption, SageMaker's stop, Kubernetes' pod deletion, torchrun passing on its
own SIGTERM. SIGINT: Ctrl-C (torchrun passes it on to its workers the same way). SIGUSR1: Slurm's
early warning (`#SBATCH --signal=USR1@120`: the job has two minutes left). Each only sets a flag:
the trainer agrees on the flags across ranks at the step boundary (distributed.reduce_step), so
every rank saves the same step even when the signal reached one rank only.
"""

from __future__ import annotations

import signal

STOP = (signal.SIGTERM, signal.SIGINT, signal.SIGUSR1)


class StopSignals:
    def __init__(self):
        self.received = [False] * len(STOP)
        for sig in STOP:
            signal.signal(sig, self._handler)
            # Restart interrupted system calls (SA_RESTART): the flag is read at the step boundary,
            # and a collective blocked in a socket read must not fail with EINTR meanwhile.
            signal.siginterrupt(sig, False)

    def _handler(self, signum, frame):
        self.received[STOP.index(signum)] = True

    @staticmethod
    def name(agreed: tuple[bool, ...]) -> str | None:
        """The signal to report when the ranks received `agreed` (SIGTERM before SIGINT before SIGUSR1)."""
        return next((sig.name for sig, got in zip(STOP, agreed, strict=True) if got), None)
