"""The raw-buffer key scalars a lookup uses (so that it need not import pandas: see
``tests/integration/test_lookup_process.py``) equal pyarrow's own."""

from __future__ import annotations

import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from sleeper_ops.io.arrow_schema import key_scalar


@settings(deadline=None)  # the first pa.scalar imports pandas
@given(st.one_of(st.tuples(st.integers(-2**31, 2**31 - 1), st.just("int32")),
                 st.tuples(st.integers(-2**63, 2**63 - 1), st.just("int64")),
                 st.tuples(st.text(), st.just("string")), st.tuples(st.binary(), st.just("binary"))))
def test_key_scalars_equal_pyarrows(value_type: tuple[object, str]) -> None:
    value, name = value_type
    t = getattr(pa, name)()
    got = key_scalar(value, t)
    assert got.type == t and got == pa.scalar(value, t) and got.as_py() == value



def test_the_lookup_kernels_answer_as_pyarrow_compute_does() -> None:
    """:mod:`sleeper_ops.engine.kernels` (called by name, so a lookup need not import
    pyarrow.compute) gives what pyarrow.compute's wrappers give, nulls included."""
    import pyarrow.compute as pc

    from sleeper_ops.engine import kernels

    t = pa.table({"k": pa.array(["b", "a", None, "c", "a"]), "n": pa.array([2, 1, 0, 3, 5])})
    lo, hi = key_scalar("a", pa.string()), key_scalar("c", pa.string())
    k = t.column("k")
    assert kernels.greater_equal(k, lo).equals(pc.greater_equal(k, lo))
    assert kernels.less(k, hi).equals(pc.less(k, hi))
    ge, lt = pc.greater_equal(k, lo), pc.less(k, hi)
    assert kernels.and_(ge, lt).equals(pc.and_(ge, lt))
    assert kernels.or_(ge, lt).equals(pc.or_(ge, lt))
    assert kernels.invert(ge).equals(pc.invert(ge))
    mask = pc.and_(ge, lt)
    assert kernels.filter_rows(t, mask).equals(t.filter(mask))
    batch = t.to_batches()[0]
    assert kernels.filter_rows(batch, mask.combine_chunks()).equals(batch.filter(mask.combine_chunks()))
    order = [("k", "ascending"), ("n", "descending")]
    assert kernels.sort_indices(t, order).equals(pc.sort_indices(t, sort_keys=order))
    assert kernels.sorted_by(t, order).equals(t.take(pc.sort_indices(t, sort_keys=order)))


def test_the_cli_imports_arrow_with_one_blas_thread_and_leaves_the_environment_as_it_was() -> None:
    """``cli.support.import_arrow`` loads NumPy's OpenBLAS with one thread (its pool's
    start is a lookup process's cost, and no command uses BLAS), unless the user set the
    variable; either way the environment child processes get is the user's."""
    import os
    import subprocess
    import sys

    code = ("import os, sys\nfrom sleeper_ops.cli.support import BLAS_THREADS, import_arrow\n"
            "import_arrow()\nassert 'pyarrow' in sys.modules\n"
            "print(os.environ.get(BLAS_THREADS))")
    env = {k: v for k, v in os.environ.items() if k != "OPENBLAS_NUM_THREADS"}
    unset = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    assert unset.returncode == 0, unset.stderr
    assert unset.stdout.strip() == "None"
    own = subprocess.run([sys.executable, "-c", code], env=dict(env, OPENBLAS_NUM_THREADS="3"), capture_output=True,
                         text=True, timeout=60)
    assert own.returncode == 0, own.stderr
    assert own.stdout.strip() == "3"
