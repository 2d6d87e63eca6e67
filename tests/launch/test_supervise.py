"""launch/supervise.py: a stop signal to the supervisor reaches the child's process group, the
supervisor waits for the child and returns its status."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap

import pytest
from signal_fixtures import wait_for

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="POSIX signals and /proc")

# The supervisor runs in its own process; its child writes its pid, waits for a signal, records it
# and exits with 7.
SUPERVISOR = textwrap.dedent("""
    import sys
    from trainplan.launch import supervise
    child = '''
    import os, signal, sys, time
    from pathlib import Path
    got = []
    for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(s, lambda n, f: got.append(n))
    Path(sys.argv[1], "pid.tmp").write_text(str(os.getpid()))
    os.replace(Path(sys.argv[1], "pid.tmp"), Path(sys.argv[1], "pid"))  # seen whole or not at all
    while not got:
        time.sleep(0.05)
    Path(sys.argv[1], "got").write_text(signal.Signals(got[0]).name)
    sys.exit(7)
    '''
    sys.exit(supervise.run([sys.executable, "-c", child, sys.argv[1]],
                           on_signal=lambda s: print("passed", s, flush=True)))
""")


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT, signal.SIGHUP])
def test_the_signal_reaches_the_child_and_its_status_is_returned(tmp_path, sig):
    p = subprocess.Popen([sys.executable, "-c", SUPERVISOR, str(tmp_path)], stdout=subprocess.PIPE, text=True,
                         env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    try:
        wait_for(lambda: (tmp_path / "pid").exists(), limit_s=60, what="the child")
        child = int((tmp_path / "pid").read_text())
        assert os.getpgid(child) == child != os.getpgid(p.pid)  # its own session: Ctrl-C reaches us only
        p.send_signal(sig)
        out = p.communicate(timeout=60)[0]
    finally:
        if p.poll() is None:
            p.kill()
    assert p.returncode == 7 and (tmp_path / "got").read_text() == sig.name
    assert out == f"passed {int(sig)}\n"


def test_a_child_killed_by_a_signal_is_reported_as_a_shell_does(tmp_path):
    from trainplan.launch import supervise

    assert supervise.run([sys.executable, "-c", "import os, signal; os.kill(os.getpid(), signal.SIGKILL)"]) == 137
    assert supervise.run(["true"]) == 0
