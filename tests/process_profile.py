"""Where the suite's CPU goes by program, servers included, for ``make test-profile``.

:mod:`tests.cpu_profile` charges each test with its own CPU and its reaped children's,
which misses what outlives its parent: the embedded PostgreSQL servers (daemons), moto,
Airflow's and Spark's long-lived processes, the lint beside the tests. With
``SLEEPER_TEST_CPU=<file>``, the run's main process also samples every process that
carries this run's mark in its environment (:data:`MARK`, set before the workers start,
so they and everything they start inherit it, unless a test builds an environment from
nothing) every :data:`INTERVAL` seconds, keeps each process's latest CPU seconds, and
writes one JSON line per process to ``<file>.processes`` at the end;
``python -m tests.process_profile <file>.processes`` sums them per program. A process
that lives less than the interval may be missed: those are the short CLI commands the
per-test figures count.
"""

from __future__ import annotations

import json
import os
import re
import sys
import threading
import uuid
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

#: the environment variable naming the run (not ``SLEEPER_``-prefixed: tests strip those)
MARK = "TEST_PROCESS_PROFILE_RUN"
INTERVAL = 0.5
_TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def program(cmdline: str) -> str:
    """A short name for what a command line runs: a Python module, script or console
    command with its first subcommand (``sleeper ingest``, ``airflow scheduler``), a
    Java main class, or the program's name."""
    argv = cmdline.split()
    if not argv:
        return "?"
    exe = Path(argv[0]).name
    if exe.startswith("postgres") or cmdline.startswith("postgres:"):
        return "postgres"
    if exe == "java":
        main = [a for a in argv[1:] if re.fullmatch(r"[a-z]+(\.[a-zA-Z0-9_$]+)+", a) and not a.startswith("-")]
        return "java " + (main[0].rsplit(".", 1)[-1] if main else "?")
    if exe.startswith("python"):
        rest = argv[1:]
        while rest and rest[0].startswith("-") and rest[0] not in ("-m", "-c"):
            rest = rest[1:]
        if not rest:
            return exe
        if rest[0] == "-m":
            return " ".join(rest[1:2]) or exe
        if rest[0] == "-c":
            return "python -c (pytest worker)" if "execnet" in cmdline or "sys.stdin.readline" in cmdline \
                else "python -c"
        script = Path(rest[0]).name
        sub = next((a for a in rest[1:] if not a.startswith("-") and "/" not in a), "")
        return f"{script} {sub}".strip() if script in ("sleeper", "airflow") else script
    sub = next((a for a in argv[1:] if not a.startswith("-") and "/" not in a), "")
    return f"{exe} {sub}".strip() if exe in ("sleeper", "airflow") else exe


@dataclass
class _Process:
    cmd: str
    cpu: float = 0.0
    reread: bool = False


def _cmdline(pid: str) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return ""


def _marked(pid: str, mark: bytes) -> bool:
    try:
        return mark in Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return False


class ProcessSampler(threading.Thread):
    """Samples the marked processes until :meth:`stop`; then writes them to ``out``."""

    def __init__(self, out: Path, mark: str) -> None:
        super().__init__(name="process-profile", daemon=True)
        self.out, self.mark = out, f"{MARK}={mark}".encode()
        self._stop_event = threading.Event()
        self.seen: dict[tuple[str, str], _Process] = {}  # by (pid, start time): pids are reused
        self._other: set[tuple[str, str]] = set()

    def run(self) -> None:
        while not self._stop_event.wait(INTERVAL):
            self.sample()

    def sample(self) -> None:
        for pid in os.listdir("/proc"):
            if not pid.isdigit():
                continue
            try:
                fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            except (OSError, IndexError):
                continue
            key = (pid, fields[19])
            if key in self._other:
                continue
            if key not in self.seen:
                if not _marked(pid, self.mark):
                    self._other.add(key)
                    continue
                self.seen[key] = _Process(_cmdline(pid))
            proc = self.seen[key]
            proc.cpu = (int(fields[11]) + int(fields[12])) / _TICK
            if not proc.reread and proc.cpu > 0.2:  # a fork that exec'd shows its own program by now
                proc.cmd, proc.reread = _cmdline(pid) or proc.cmd, True

    def stop(self) -> None:
        self._stop_event.set()
        if self.ident is not None:  # started
            self.join(timeout=10)
        self.sample()
        with self.out.open("w") as out:
            for (pid, _), proc in self.seen.items():
                out.write(json.dumps({"pid": int(pid), "cmd": proc.cmd, "cpu": proc.cpu}) + "\n")


def start(cpu_file: Optional[str]) -> Optional[ProcessSampler]:
    """In the run's main process, with ``SLEEPER_TEST_CPU`` set: mark the environment and
    start sampling into ``<file>.processes``; None otherwise (or without /proc)."""
    if not cpu_file or not Path("/proc/self/environ").exists() or MARK in os.environ:
        return None
    os.environ[MARK] = uuid.uuid4().hex
    sampler = ProcessSampler(Path(cpu_file + ".processes"), os.environ[MARK])
    sampler.start()
    return sampler


def summary(path: Path, top: int = 30) -> str:
    """CPU seconds and processes per program, heaviest first."""
    cpu: dict[str, float] = defaultdict(float)
    count: dict[str, int] = defaultdict(int)
    for raw in path.read_text().splitlines():
        row = json.loads(raw)
        name = program(row["cmd"])
        cpu[name] += row["cpu"]
        count[name] += 1
    total = sum(cpu.values())
    lines = [f"{total:8.0f} s CPU in all, {sum(count.values())} processes sampled every {INTERVAL:g} s"]
    for name in sorted(cpu, key=cpu.__getitem__, reverse=True)[:top]:
        lines.append(f"{cpu[name]:8.1f} s CPU {100 * cpu[name] / max(total, 1e-9):5.1f}%  {count[name]:5d}  {name}")
    return "\n".join(lines)


if __name__ == "__main__":
    print(summary(Path(sys.argv[1]), int(sys.argv[2]) if len(sys.argv) > 2 else 30))
