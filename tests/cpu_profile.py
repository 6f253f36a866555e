"""Where the suite's time goes: CPU seconds per test module, for ``make test-profile``.

The machine running ``make test`` has two cores and the suite keeps both busy, so the
wall time of a test says little (it waits on the others); the CPU time it costs, its own
and its child processes' (servers, CLI commands, JVMs), is what another test waits for.
With ``SLEEPER_TEST_CPU=<file>`` each xdist worker appends one JSON line per test
(module, test, seconds of wall, seconds of CPU of the worker process, seconds of CPU of
its waited-for children) to the file; ``python -m tests.cpu_profile <file>`` sums them
per module, heaviest first. A child still running when a test ends (a module-scoped
server) counts when its fixture stops it, in the test that ran last.
"""

from __future__ import annotations

import json
import os
import resource
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Iterator

import pytest

ENV = "SLEEPER_TEST_CPU"


def _cpu() -> tuple[float, float]:
    me = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime, kids.ru_utime + kids.ru_stime


class CpuProfile:
    """A pytest plugin: one line per test into ``path`` (opened for append per line,
    so the workers' lines interleave whole)."""

    def __init__(self, path: Path) -> None:
        self.path = path

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_protocol(self, item: pytest.Item) -> Iterator[None]:
        wall, (me, kids) = time.monotonic(), _cpu()
        yield
        me2, kids2 = _cpu()
        line = {"module": item.nodeid.split("::", 1)[0], "test": item.nodeid,
                "wall": round(time.monotonic() - wall, 3), "cpu": round(me2 - me, 3),
                "children": round(kids2 - kids, 3)}
        with self.path.open("a") as out:
            out.write(json.dumps(line) + "\n")


def register(config: pytest.Config) -> None:
    """Install the plugin when ``SLEEPER_TEST_CPU`` names a file."""
    target = os.environ.get(ENV)
    if target:
        config.pluginmanager.register(CpuProfile(Path(target)), "sleeper-cpu-profile")


def summary(path: Path, top: int = 40) -> str:
    """Per module: CPU seconds (own + children), wall seconds and tests, heaviest first."""
    cpu: dict[str, float] = defaultdict(float)
    wall: dict[str, float] = defaultdict(float)
    tests: dict[str, int] = defaultdict(int)
    for raw in path.read_text().splitlines():
        row = json.loads(raw)
        cpu[row["module"]] += row["cpu"] + row["children"]
        wall[row["module"]] += row["wall"]
        tests[row["module"]] += 1
    total = sum(cpu.values())
    lines = [f"{total:8.0f} s CPU in all, {sum(tests.values())} tests"]
    for module in sorted(cpu, key=cpu.__getitem__, reverse=True)[:top]:
        lines.append(f"{cpu[module]:8.1f} s CPU {100 * cpu[module] / total:5.1f}%  "
                     f"{wall[module]:7.1f} s wall {tests[module]:5d}  {module}")
    return "\n".join(lines)


if __name__ == "__main__":
    print(summary(Path(sys.argv[1]), int(sys.argv[2]) if len(sys.argv) > 2 else 40))
