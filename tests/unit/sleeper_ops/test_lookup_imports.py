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

