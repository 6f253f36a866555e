"""Arrow's memory pool in Sleeper's processes: jemalloc, unless the user chose one.

pyarrow's default pool on Linux is mimalloc. In a new process -- every ``sleeper``
command, Airflow task, Spark Python worker -- its first pass over a few hundred MB
was measured at about twice the time of jemalloc's (an ingest of 2 M rows in a new
process: median 3.0 s against 1.6 s; docs/adr/0012-arrow-memory-pool.md). A process that
has made the same pass before is as fast or faster on mimalloc (one core: 1.4 s against
1.7 s), so the choice favours the new processes Sleeper mostly runs.

:func:`prefer_jemalloc` runs when ``sleeper_ops`` is imported, before any of its
modules loads pyarrow:

* it sets ``ARROW_DEFAULT_MEMORY_POOL=jemalloc`` in the environment, which Arrow reads
  when its default pool is first used, and which the processes this one starts inherit;
* when pyarrow is already imported, it also makes jemalloc pyarrow's default pool.

A pool the user named in ``ARROW_DEFAULT_MEMORY_POOL`` is always kept, and nothing is
changed off Linux (pyarrow's wheels for other systems may lack jemalloc) or when this
pyarrow has no jemalloc. Buffers already allocated keep the pool they came from.
"""

from __future__ import annotations

import os
import sys

VARIABLE = "ARROW_DEFAULT_MEMORY_POOL"
PREFERRED = "jemalloc"
_chosen_here = False


def environment_without_our_choice(env: dict[str, str]) -> dict[str, str]:
    """``env`` without the variable when :func:`prefer_jemalloc` set it in this process
    (a user's own setting is kept): for processes that must run at their library's
    default, such as a peer system in a benchmark."""
    return {k: v for k, v in env.items() if not (_chosen_here and k == VARIABLE)}


def prefer_jemalloc() -> bool:
    """Make jemalloc Arrow's default pool as the module docstring says; whether this
    call chose it (False: the user's choice stands, or not on Linux)."""
    global _chosen_here
    if VARIABLE in os.environ or not sys.platform.startswith("linux"):
        return False
    os.environ[VARIABLE] = PREFERRED
    pa = sys.modules.get("pyarrow")
    if pa is not None:
        try:
            pa.set_memory_pool(pa.jemalloc_memory_pool())
        except (NotImplementedError, AttributeError):  # a pyarrow built without jemalloc
            del os.environ[VARIABLE]
            return False
    _chosen_here = True
    return True
