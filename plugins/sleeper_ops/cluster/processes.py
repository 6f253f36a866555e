"""Processes of the cluster: started each in a session (process group) of its own, in its
own working directory, with its output in a log; waited for by a line in that log;
stopped by process group (SIGTERM, then SIGKILL after a grace period), so whatever a
process forked (Celery's pool, Airflow's task supervisors) stops with it and nothing
else on the machine is touched. :func:`restart_process` stops one the same way (or
SIGKILLs it at once, as a crash would) and starts it again as it was first started,
its output appended to the same log.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import IO, Callable, Mapping, Optional, Sequence

from sleeper_ops.errors import ConfigError
from sleeper_ops.spark.cluster import Piece

STOP_GRACE_SECONDS = 20.0
#: variables of the caller's environment no cluster process inherits: each gets its
#: Sleeper and Airflow settings from :mod:`sleeper_ops.cluster.environment` alone
NOT_INHERITED_PREFIXES = ("SLEEPER_", "AIRFLOW_", "AIRFLOW__")


def clean_environment(base: Optional[Mapping[str, str]] = None) -> dict[str, str]:
    """``base`` (default: this process's environment) without Sleeper and Airflow
    settings, with this Python's ``bin`` first on ``PATH`` (``airflow``, ``spark-class``)."""
    env = {k: v for k, v in (os.environ if base is None else base).items()
           if not k.startswith(NOT_INHERITED_PREFIXES)}
    env["PATH"] = str(Path(sys.executable).parent) + os.pathsep + env.get("PATH", "")
    return env


def start_process(name: str, url: str, cmd: Sequence[str], *, log: Path, env: Mapping[str, str],
                  cwd: Optional[Path] = None, append: bool = False) -> Piece:
    """Start ``cmd`` in a session of its own, output to ``log`` (after what it holds
    when ``append``)."""
    log.parent.mkdir(parents=True, exist_ok=True)
    if cwd is not None:
        cwd.mkdir(parents=True, exist_ok=True)
    out: IO[bytes] = open(log, "ab" if append else "wb")
    try:
        proc = subprocess.Popen(list(cmd), stdout=out, stderr=subprocess.STDOUT, env=dict(env), cwd=cwd,
                                start_new_session=True)
    finally:
        out.close()
    return Piece(name, url, log, proc, tuple(cmd), dict(env), cwd)


def kill_group(piece: Piece) -> None:
    """SIGKILL ``piece``'s process group at once (a crash: nothing of it gets to clean
    up) and reap its leader."""
    _signal_group(piece.process.pid, signal.SIGKILL)
    try:
        piece.process.wait(10.0)
    except subprocess.TimeoutExpired:
        pass


def restart_process(piece: Piece, *, kill: bool = False, grace: float = STOP_GRACE_SECONDS) -> Piece:
    """Stop ``piece``'s process group (SIGTERM, SIGKILL after ``grace``; or SIGKILL at
    once with ``kill``), then start its command again with the same environment and
    working directory, output appended to its log; the new piece (same name and URL).
    Raises ConfigError for a piece that does not say how it was started."""
    if not piece.command or piece.env is None:
        raise ConfigError(f"the {piece.name} cannot be restarted: it was not started by start_process")
    if kill:
        kill_group(piece)
    else:
        stop_groups([piece], grace)
    with open(piece.log, "ab") as out:
        out.write(f"\n--- {piece.name} restarted ---\n".encode())
    return start_process(piece.name, piece.url, piece.command, log=piece.log, env=piece.env, cwd=piece.cwd,
                         append=True)


def wait_for_log(piece: Piece, pattern: str, deadline: float) -> str:
    """Wait until ``piece``'s log matches ``pattern`` (before ``deadline``, a monotonic
    time); the match. Raises ConfigError if the process exits first or time runs out."""
    regex = re.compile(pattern)
    while True:
        text = piece.log.read_text(errors="replace") if piece.log.exists() else ""
        found = regex.search(text)
        if found:
            return found.group(0)
        if piece.process.poll() is not None:
            raise ConfigError(f"the {piece.name} exited with code {piece.process.returncode}: {text[-2000:]}")
        if time.monotonic() > deadline:
            raise ConfigError(f"the {piece.name} was not ready in time (see {piece.log})")
        time.sleep(0.3)


def wait_until(check: Callable[[], bool], what: str, deadline: float, alive: Callable[[], Optional[str]]) -> None:
    """Poll ``check`` until it is true; raise ConfigError when ``alive`` names a process
    that exited, or at ``deadline``."""
    while not check():
        dead = alive()
        if dead:
            raise ConfigError(f"{dead} while waiting for {what}")
        if time.monotonic() > deadline:
            raise ConfigError(f"timed out waiting for {what}")
        time.sleep(0.5)


def stop_groups(pieces: Sequence[Piece], grace: float = STOP_GRACE_SECONDS) -> list[str]:
    """Stop the process groups of ``pieces`` together: SIGTERM to each, then SIGKILL to
    what is left of any after ``grace`` seconds; the names of those killed so. Returns
    once every process of the groups is gone (a SIGKILLed process dies when next
    scheduled, not at once), or after 10 s more."""
    for piece in pieces:
        _signal_group(piece.process.pid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline and any(_group_alive(p.process.pid) for p in pieces):
        for piece in pieces:
            piece.process.poll()  # reap each leader so it does not count as alive
        time.sleep(0.2)
    killed = [p.name for p in pieces if _group_alive(p.process.pid)]
    for piece in pieces:
        _signal_group(piece.process.pid, signal.SIGKILL)
    deadline = time.monotonic() + 10.0
    for piece in pieces:
        try:
            piece.process.wait(max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            pass
    while time.monotonic() < deadline and any(_group_alive(p.process.pid) for p in pieces):
        time.sleep(0.05)
    return killed


def _signal_group(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _group_alive(pgid: int) -> bool:
    """Whether a process of group ``pgid`` still runs (zombies, which only wait for their
    parent to reap them, do not count; without ``/proc``, whether the group exists)."""
    try:
        os.killpg(pgid, 0)
    except (ProcessLookupError, PermissionError):
        return False
    proc = Path("/proc")
    if not proc.is_dir():
        return True
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rfind(")") + 2:].split()  # after "pid (comm) ": state, ppid, pgrp, ...
        if len(fields) > 2 and int(fields[2]) == pgid and fields[0] != "Z":
            return True
    return False
