"""DataFusion and pyarrow.dataset imported without pandas (sleeper_ops.io.pandas_free): a
new process that loads DataFusion and merges files with it, or runs a SQL statement, never
imports pandas, pyarrow's functions are
its own again afterwards, and while they are replaced they answer as pyarrow does."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from sleeper_ops.io.pandas_free import _array_without_pandas, _scalar_without_pandas


def _run(code: str) -> str:
    out = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


def test_a_process_that_loads_datafusion_and_merges_files_imports_no_pandas(tmp_path):
    """Before, ``import datafusion`` imported pandas (0.23-0.27 s of every `sleeper compact`)."""
    for i in range(2):
        pq.write_table(pa.table({"key": pa.array([f"k{j:03d}" for j in range(i, 40, 2)]),
                                 "ts": pa.array(range(20), pa.int64()), "v": pa.array(["x"] * 20)}),
                       tmp_path / f"f{i}.parquet")
    got = _run(f"""
        import sys
        import pyarrow as pa
        scalar, array = pa.scalar, pa.array
        from sleeper_ops.engine.merge import merge_sorted
        from statestore.schema import Schema
        schema = Schema.from_dict({{"rowKeyFields": [{{"name": "key", "type": "StringType"}}],
                                   "sortKeyFields": [{{"name": "ts", "type": "LongType"}}],
                                   "valueFields": [{{"name": "v", "type": "StringType"}}]}})
        keys = [k for b in merge_sorted([{str(tmp_path / "f0.parquet")!r}, {str(tmp_path / "f1.parquet")!r}], schema)
                for k in b.column("key").to_pylist()]
        assert keys == sorted(keys) and len(keys) == 40, keys
        assert pa.scalar is scalar and pa.array is array, "pyarrow's functions are its own again"
        print("datafusion" in sys.modules, "pandas" in sys.modules)
    """)
    assert got == "True False"


def test_loading_twice_gives_the_module_imported_once():
    assert _run("""
        from sleeper_ops.io.pandas_free import load_datafusion, load_pyarrow_dataset
        import datafusion
        import pyarrow.dataset
        print(load_datafusion() is datafusion and load_datafusion() is datafusion
              and load_pyarrow_dataset() is pyarrow.dataset)
    """) == "True"


def test_a_process_that_runs_a_sql_statement_imports_no_pandas(tmp_path):
    """Before, ``import pyarrow.dataset`` (DataFusion's provider of a Sleeper table in
    ``sleeper sql``) imported pandas: 0.25 s of every statement's process."""
    pq.write_table(pa.table({"key": [f"k{i:03d}" for i in range(50)], "n": pa.array(range(50), pa.int64())}),
                   tmp_path / "in.parquet")
    got = _run(f"""
        import sys
        import pyarrow as pa
        from sleeper_ops.api import Sleeper
        from sleeper_ops.io.storage import ObjectStore
        from statestore.memory import InMemoryStateStore
        scalar = pa.lib.scalar
        with Sleeper(state_store=InMemoryStateStore(), objects=ObjectStore({str(tmp_path / "data")!r})) as s:
            t = s.create_table("t", {{"rowKeyFields": [{{"name": "key", "type": "StringType"}}],
                                      "valueFields": [{{"name": "n", "type": "LongType"}}]}})
            t.ingest([{str(tmp_path / "in.parquet")!r}])
            rows = s.sql("SELECT count(*) AS c, sum(n) AS s FROM t WHERE key >= 'k010'").to_pylist()
        assert rows == [{{"c": 40, "s": sum(range(10, 50))}}], rows
        assert pa.lib.scalar is scalar, "pyarrow's function is its own again"
        print("pyarrow.dataset" in sys.modules, "pandas" in sys.modules)
    """)
    assert got == "True False"


def test_the_replaced_scalar_answers_a_bare_boolean_as_pyarrows_own():
    scalar = _scalar_without_pandas(pa.scalar)
    for value in (True, False):
        got, want = scalar(value), pa.scalar(value)
        assert got.equals(want) and got.type == want.type == pa.bool_() and got.as_py() is value
    # a boolean with a type, or anything truthy that is not a bool, is pyarrow's own call
    assert scalar(True, type=pa.bool_()).equals(pa.scalar(True, type=pa.bool_()))
    assert scalar(1).equals(pa.scalar(1)) and scalar(0).type == pa.int64()
    with pytest.raises(pa.ArrowTypeError):  # pyarrow's own refusal
        scalar(True, type=pa.int8())


INT_TYPES = [pa.int8(), pa.int16(), pa.int32(), pa.int64(), pa.uint8(), pa.uint16(), pa.uint32(), pa.uint64()]


@pytest.mark.parametrize("type_", INT_TYPES, ids=str)
def test_the_replaced_scalar_answers_as_pyarrows_own(type_):
    scalar = _scalar_without_pandas(pa.scalar)
    lo, hi = (0, 2 ** type_.bit_width - 1) if pa.types.is_unsigned_integer(type_) else (
        -(2 ** (type_.bit_width - 1)), 2 ** (type_.bit_width - 1) - 1)
    for value in (lo, hi, 0, 1, hi // 3):
        got, want = scalar(value, type=type_), pa.scalar(value, type=type_)
        assert got.equals(want) and got.type == want.type, (value, got, want)
    for value in (lo - 1, hi + 1):  # out of range: pyarrow's own error
        with pytest.raises(Exception) as want_error:
            pa.scalar(value, type=type_)
        with pytest.raises(want_error.type):
            scalar(value, type=type_)
    # anything else is pyarrow's own call
    assert scalar("a").equals(pa.scalar("a")) and scalar(True, type=pa.bool_()).equals(pa.scalar(True))
    assert scalar(1.5, type=pa.float64()).equals(pa.scalar(1.5, type=pa.float64())) and scalar(3).equals(pa.scalar(3))
    assert scalar(5, type="int16").equals(pa.scalar(5, type="int16"))  # a type by name


@pytest.mark.parametrize("value", [pa.scalar(7, pa.int32()), pa.scalar("abc", pa.string_view()), pa.scalar("é"),
                                   pa.scalar(b"\x00", pa.binary()), pa.scalar(None, pa.int64()), pa.scalar(2.5)],
                         ids=repr)
def test_the_replaced_array_answers_as_pyarrows_own(value):
    array = _array_without_pandas(pa.array)
    for type_ in (None, value.type):
        got, want = array([value], type_), pa.array([value], type_)
        assert got.equals(want) and got.type == want.type
    # anything else is pyarrow's own call
    assert array([1, 2, None]).equals(pa.array([1, 2, None]))
    assert array([value, value]).equals(pa.array([value, value]))
    assert array([7], "int64").equals(pa.array([7], "int64"))  # a type by name
    with pytest.raises(pa.ArrowInvalid):  # a scalar of another type: pyarrow's own refusal
        array([pa.scalar(1, pa.int8())], pa.int64())
