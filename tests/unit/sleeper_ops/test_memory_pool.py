"""Arrow's default pool in a process that imports ``sleeper_ops``: jemalloc, unless the
user named one (sleeper_ops.io.memory_pool). Each case is a new interpreter, since the
pool is chosen once per process."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the pool is chosen on Linux only")


def _pool(code: str, **env: str) -> str:
    base = {k: v for k, v in os.environ.items() if k != "ARROW_DEFAULT_MEMORY_POOL"}
    p = subprocess.run([sys.executable, "-c", code], env={**base, **env}, capture_output=True, text=True,
                       timeout=60)
    assert p.returncode == 0, p.stderr
    return p.stdout.split()[-1]


def test_jemalloc_when_sleeper_ops_comes_first_and_its_children_inherit_it() -> None:
    code = ("import sleeper_ops, os, subprocess, sys, pyarrow as pa; print(pa.default_memory_pool().backend_name);"
            "print(subprocess.run([sys.executable, '-c', 'import pyarrow as pa; "
            "print(pa.default_memory_pool().backend_name)'], capture_output=True, text=True).stdout)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                         env={k: v for k, v in os.environ.items() if k != "ARROW_DEFAULT_MEMORY_POOL"})
    assert out.stdout.split() == ["jemalloc", "jemalloc"], out.stderr


def test_jemalloc_when_pyarrow_was_imported_and_used_first() -> None:
    assert _pool("import pyarrow as pa; pa.array([1, 2]); import sleeper_ops;"
                 "print(pa.default_memory_pool().backend_name)") == "jemalloc"


@pytest.mark.parametrize("chosen", ["system", "mimalloc"])
def test_the_users_choice_stands(chosen: str) -> None:
    assert _pool("import sleeper_ops, pyarrow as pa; print(pa.default_memory_pool().backend_name)",
                 ARROW_DEFAULT_MEMORY_POOL=chosen) == chosen


@pytest.mark.parametrize("users", [None, "system"])
def test_a_peer_in_a_bench_runs_at_its_default_unless_the_user_chose_a_pool(users: str | None) -> None:
    code = ("import os, sleeper_ops; from sleeper_ops.io.memory_pool import environment_without_our_choice;"
            "print(environment_without_our_choice(dict(os.environ)).get('ARROW_DEFAULT_MEMORY_POOL', 'unset'))")
    assert _pool(code, **({"ARROW_DEFAULT_MEMORY_POOL": users} if users else {})) == (users or "unset")
