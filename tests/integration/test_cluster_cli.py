"""``sleeper cluster``'s own part, as a user runs it (a process, Ctrl-C), on a stand-in
cluster: the command stops what it started on SIGINT or SIGTERM, exits 0 saying why, and
stops the cluster when one of its processes dies.

The cluster itself (``sleeper_ops.cluster.run.running_cluster``) is replaced in the
command's process by one real child process started and stopped with the cluster's own
``start_process`` / ``stop_groups``, so what is checked here is the command: its
signal handling and its wait. The real cluster's start, its work and that stopping it
leaves no process are tests/system/test_cluster.py's (one cluster for the whole suite:
each costs a minute of both cores to start)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.cluster_helpers import poll, processes_using

pytestmark = pytest.mark.integration

#: the ``sleeper`` command with the cluster swapped for one ``sleep`` process in ``work``
STAND_IN = textwrap.dedent("""
    import contextlib, sys
    from pathlib import Path
    import sleeper_ops.cluster.report as report
    import sleeper_ops.cluster.run as run
    from sleeper_ops.cluster.processes import start_process, stop_groups

    class Waited(run.RunningCluster):
        def dead(self):  # asked only by the command's wait, once a second: it is waiting
            (self.work / "waiting").touch()
            return super().dead()

    @contextlib.contextmanager
    def running_cluster(work, **kwargs):
        work = Path(work)
        piece = start_process("stand-in", "", ["sleep", "600"], log=work / "stand-in.log", env={}, cwd=work)
        cluster = Waited(layout=None, work=work, pieces=[piece])
        try:
            (work / "started").write_text(str(piece.process.pid))
            yield cluster
        finally:
            cluster.killed += stop_groups(cluster.pieces)

    run.running_cluster = running_cluster
    report.ready_lines = lambda c: ["cluster ready"]
    from sleeper_ops.cli import main
    sys.exit(main(sys.argv[1:]))
""")


def _start(tmp_path: Path) -> tuple[subprocess.Popen[str], Path]:
    work = tmp_path / "w"
    proc = subprocess.Popen([sys.executable, "-c", STAND_IN, "--home", str(tmp_path / "home"), "cluster",
                             "--no-spark", "--port", "0", "--work-dir", str(work)],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    poll(lambda: (work / "started").exists() or proc.poll() is not None, "the stand-in cluster to start", 60)
    assert proc.poll() is None, proc.communicate()[0]
    return proc, work


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["Ctrl-C", "SIGTERM"])
def test_a_signal_stops_the_cluster_and_the_command_exits_0_saying_why(tmp_path: Path, sig: signal.Signals) -> None:
    proc, work = _start(tmp_path)
    child = int((work / "started").read_text())
    poll(lambda: (work / "waiting").exists(), "the command to wait on its started cluster", 60)  # past the start
    proc.send_signal(sig)
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 0, out
    assert "cluster ready" in out
    assert f"{sig.name} received: stopped the cluster" in out, out
    assert not Path(f"/proc/{child}").exists() or "Z" in Path(f"/proc/{child}/stat").read_text().split()[2]
    assert processes_using(str(work)) == []


def test_a_cluster_process_that_dies_stops_the_cluster_and_says_which(tmp_path: Path) -> None:
    proc, work = _start(tmp_path)
    os.kill(int((work / "started").read_text()), signal.SIGKILL)
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 0, out
    assert "the stand-in exited with code -9" in out and "stopped the cluster" in out, out
    assert processes_using(str(work)) == []
