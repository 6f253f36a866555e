"""Table iterators over Arrow batches: age-off, user iterators, aggregation, their order and errors.

Aggregation is compared with a plain Python reference, including a hypothesis test over
random key-ordered inputs cut into random batches.
"""

from __future__ import annotations

import pickle
from pathlib import Path
from typing import Any, Optional, Sequence

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sleeper_ops.engine.iterators import IteratorChain
from sleeper_ops.errors import ConfigError, IteratorError
from sleeper_ops.io.arrow_schema import arrow_schema
from statestore.catalog import TableInfo
from statestore.clock import ManualClock, use_clock
from statestore.properties import validate_properties
from statestore.schema import Schema

SCHEMA = Schema.from_dict({
    "rowKeyFields": [{"name": "key", "type": "StringType"}],
    "sortKeyFields": [{"name": "ts", "type": "LongType"}],
    "valueFields": [{"name": "count", "type": "LongType"}, {"name": "small", "type": "IntType"},
                    {"name": "name", "type": "StringType"}, {"name": "blob", "type": "ByteArrayType"}],
})
TARGET = arrow_schema(SCHEMA)
AGG = "sum(count),sum(small),min(name),max(blob)"
AGEOFF = "sleeper.table.iterator.ageoff"
AGGREGATION = "sleeper.table.iterator.aggregation"
PYTHON = "sleeper.table.iterator.python"
HERE = Path(__file__).parent
#: the modules these tests allow Python iterators from (iterators.python_modules)
MODULES = ("iterator_samples", "no_such_module_for_sleeper")


def info(props: Optional[dict[str, str]] = None, schema: Schema = SCHEMA) -> TableInfo:
    return TableInfo("table-id", "t", schema, validate_properties(props or {}))


def row(key: str, ts: int = 0, count: Optional[int] = 1, small: Optional[int] = 1, name: Optional[str] = "n",
        blob: Optional[bytes] = b"b") -> dict[str, Any]:
    return {"key": key, "ts": ts, "count": count, "small": small, "name": name, "blob": blob}


def batches(rows: list[dict], cuts: Sequence[int] = (), schema: pa.Schema = TARGET) -> list[pa.RecordBatch]:
    """``rows`` as record batches, cut before each index in ``cuts``."""
    edges = [0, *cuts, len(rows)]
    return [pa.RecordBatch.from_pylist(rows[a:b], schema=schema) for a, b in zip(edges, edges[1:])]


def run(chain: IteratorChain, bs: list[pa.RecordBatch]) -> list[dict]:
    out = list(chain.apply(bs))
    for b in out:
        assert b.schema.equals(chain.target), f"output batch schema {b.schema} differs from the table's"
        assert b.num_rows > 0, "empty batch yielded"
    return pa.Table.from_batches(out, schema=chain.target).to_pylist()


@pytest.fixture
def samples(monkeypatch):
    """Makes ``iterator_samples`` (next to this file) importable."""
    monkeypatch.syspath_prepend(str(HERE))


# ----- empty chain ----------------------------------------------------------------------------

def test_table_without_iterator_properties_has_an_empty_chain_that_changes_nothing():
    chain = IteratorChain.for_table(info())
    assert chain.is_empty
    assert chain.describe() == "none"
    rows = [row("a", count=1), row("a", count=2)]
    table = pa.Table.from_pylist(rows, schema=TARGET)
    assert chain.apply_table(table).to_pylist() == rows
    assert run(chain, batches(rows, [1])) == rows


# ----- age-off ------------------------------------------------------------------------------

def test_ageoff_keeps_records_exactly_max_age_old_and_drops_older_ones():
    now, age = 1_000_000, 1000
    chain = IteratorChain.for_table(info({AGEOFF: f"ts:{age}"}), now_ms=now)
    rows = [row("a", ts=now - age - 1), row("b", ts=now - age), row("c", ts=now - age + 1), row("d", ts=now),
            row("e", ts=now + 5000)]
    assert [r["key"] for r in run(chain, batches(rows, [2]))] == ["b", "c", "d", "e"]


def test_ageoff_on_a_nullable_int_value_field_keeps_nulls():
    schema = Schema.from_dict({"rowKeyFields": [{"name": "key", "type": "LongType"}],
                               "valueFields": [{"name": "seen", "type": "IntType"}]})
    chain = IteratorChain.for_table(info({AGEOFF: "seen:10"}, schema), now_ms=100)
    rows = [{"key": 1, "seen": 89}, {"key": 2, "seen": None}, {"key": 3, "seen": 90}, {"key": 4, "seen": 5}]
    out = run(chain, batches(rows, schema=arrow_schema(schema)))
    assert [r["key"] for r in out] == [2, 3]


def test_ageoff_on_a_row_key_field_with_a_threshold_below_the_int_range():
    schema = Schema.from_dict({"rowKeyFields": [{"name": "t", "type": "IntType"}]})
    chain = IteratorChain.for_table(info({AGEOFF: "t:5000000000"}, schema), now_ms=0)
    rows = [{"t": -(2**31)}, {"t": 0}]
    assert run(chain, batches(rows, schema=arrow_schema(schema))) == rows


def test_ageoff_without_now_uses_the_clock_when_applied():
    chain = IteratorChain.for_table(info({AGEOFF: "ts:1000"}))
    with use_clock(ManualClock(50_000)) as clock:
        rows = [row("a", ts=48_999), row("b", ts=49_000)]
        assert [r["key"] for r in run(chain, batches(rows))] == ["b"]
        clock.set(60_000)
        assert run(chain, batches(rows)) == []


def test_ageoff_dropping_every_record_yields_nothing():
    chain = IteratorChain.for_table(info({AGEOFF: "ts:0"}), now_ms=10)
    assert run(chain, batches([row("a", ts=1), row("b", ts=2)], [1])) == []
    assert chain.apply_table(pa.Table.from_pylist([row("a", ts=1)], schema=TARGET)).num_rows == 0


@pytest.mark.parametrize("value, message", [
    ("nope:10", "no field 'nope'"),
    ("name:10", "field 'name' is StringType"),
])
def test_ageoff_on_a_missing_or_non_numeric_field_is_a_config_error(value, message):
    with pytest.raises(ConfigError, match=message) as e:
        IteratorChain.for_table(info({AGEOFF: value}))
    assert AGEOFF in str(e.value)


# ----- aggregation --------------------------------------------------------------------------

def test_aggregation_combines_a_key_spanning_three_batches_into_one_record():
    chain = IteratorChain.for_table(info({AGGREGATION: AGG}))
    rows = ([row("a", count=1, small=1, name="x", blob=b"\x01")]
            + [row("b", count=i, small=2, name=f"n{i:02d}", blob=bytes([i])) for i in range(10)]
            + [row("c", count=7, small=3, name="y", blob=b"\x02")])
    # "b" spans the end of batch 1, all of batch 2 and the start of batch 3
    out = run(chain, batches(rows, [3, 7]))
    assert out == [
        row("a", count=1, small=1, name="x", blob=b"\x01"),
        row("b", count=45, small=20, name="n00", blob=b"\x09"),
        row("c", count=7, small=3, name="y", blob=b"\x02"),
    ]


def test_aggregation_keeps_records_with_different_sort_keys_apart_and_several_row_key_fields():
    schema = Schema.from_dict({
        "rowKeyFields": [{"name": "a", "type": "IntType"}, {"name": "b", "type": "ByteArrayType"}],
        "sortKeyFields": [{"name": "c", "type": "LongType"}],
        "valueFields": [{"name": "v", "type": "LongType"}, {"name": "w", "type": "IntType"}],
    })
    chain = IteratorChain.for_table(info({AGGREGATION: "max(w), sum(v)"}, schema))
    rows = [
        {"a": 1, "b": b"x", "c": 1, "v": 1, "w": 5},
        {"a": 1, "b": b"x", "c": 1, "v": 2, "w": 9},
        {"a": 1, "b": b"x", "c": 2, "v": 4, "w": 1},
        {"a": 1, "b": b"y", "c": 2, "v": 8, "w": 1},
        {"a": 2, "b": b"x", "c": 2, "v": 16, "w": 3},
        {"a": 2, "b": b"x", "c": 2, "v": 32, "w": 2},
    ]
    out = run(chain, batches(rows, [1, 5], schema=arrow_schema(schema)))
    assert out == [
        {"a": 1, "b": b"x", "c": 1, "v": 3, "w": 9},
        {"a": 1, "b": b"x", "c": 2, "v": 4, "w": 1},
        {"a": 1, "b": b"y", "c": 2, "v": 8, "w": 1},
        {"a": 2, "b": b"x", "c": 2, "v": 48, "w": 3},
    ]


def test_aggregation_orders_strings_by_code_point_and_bytes_unsigned():
    chain = IteratorChain.for_table(info({AGGREGATION: "sum(count),sum(small),max(name),min(blob)"}))
    rows = [row("a", name="z", blob=b"\xff"), row("a", name="é", blob=b"\x01\x00"), row("a", name="Z", blob=b"\x7f")]
    (out,) = run(chain, batches(rows, [1]))
    assert out["name"] == "é" and out["blob"] == b"\x01\x00"
    chain = IteratorChain.for_table(info({AGGREGATION: AGG}))
    (out,) = run(chain, batches(rows, [2]))
    assert out["name"] == "Z" and out["blob"] == b"\xff"


def test_aggregation_ignores_nulls_and_gives_null_when_a_group_has_only_nulls():
    chain = IteratorChain.for_table(info({AGGREGATION: AGG}))
    rows = [row("a", count=None, small=None, name=None, blob=None),
            row("a", count=3, small=None, name="q", blob=None),
            row("b", count=None, small=None, name=None, blob=None),
            row("b", count=None, small=None, name=None, blob=None)]
    assert run(chain, batches(rows, [1, 3])) == [
        row("a", count=3, small=None, name="q", blob=None),
        row("b", count=None, small=None, name=None, blob=None),
    ]


def test_int_and_long_sums_wrap_on_overflow_like_java():
    chain = IteratorChain.for_table(info({AGGREGATION: AGG}))
    rows = [row("a", count=2**63 - 1, small=2**31 - 1), row("a", count=2, small=2)]
    (out,) = run(chain, batches(rows, [1]))
    assert out["count"] == -(2**63) + 1
    assert out["small"] == -(2**31) + 1


def test_aggregation_of_a_whole_table_gives_each_key_once():
    chain = IteratorChain.for_table(info({AGGREGATION: AGG}))
    rows = [row(k, count=1) for k in "aaabccc"]
    table = pa.concat_tables([pa.Table.from_pylist(rows[:2], schema=TARGET),
                              pa.Table.from_pylist(rows[2:], schema=TARGET)])
    out = chain.apply_table(table)
    assert out.schema.equals(TARGET)
    assert out.select(["key", "count"]).to_pylist() == [{"key": "a", "count": 3}, {"key": "b", "count": 1},
                                                        {"key": "c", "count": 3}]


def test_aggregation_of_many_keys_over_several_key_fields_keeps_key_order():
    chain = IteratorChain.for_table(info({AGGREGATION: AGG}))
    rows = [row(f"k{k:04d}", ts=t, count=1) for k in range(500) for t in (1, 2) for _ in range(2)]
    out = run(chain, batches(rows, [333, 1000, 1001]))
    assert [(r["key"], r["ts"], r["count"]) for r in out] == [(f"k{k:04d}", t, 2) for k in range(500) for t in (1, 2)]


MAP_LIST_SCHEMA = Schema.from_dict({
    "rowKeyFields": [{"name": "key", "type": "LongType"}],
    "valueFields": [{"name": "n", "type": "LongType"}, {"name": "s", "type": "StringType"},
                    {"name": "m", "type": {"MapType": {"keyType": "StringType", "valueType": "LongType"}}},
                    {"name": "l", "type": {"ListType": {"elementType": "IntType"}}}],
})


@pytest.mark.parametrize("value, message", [
    ("sum(n),min(s)", "every value field needs an aggregation; missing m, l"),
    ("sum(n)", "missing s, m, l"),
    ("sum(n),max(n),min(s),max(m),max(l)", "'n' is named more than once"),
    ("sum(key),min(s),max(m),max(l)", "'key' is a key field"),
    ("sum(zzz),sum(n),min(s),max(m),max(l)", "no value field 'zzz'"),
    ("sum(n),sum(s),max(m),max(l)", r"sum\(s\) needs an IntType or LongType field; 's' is StringType"),
    ("sum(n),min(s),min(m),max(l)", r"min\(m\) needs an int, long, string or bytes field; 'm' is MapType"),
    ("sum(n),min(s),sum(m),max(l)", r"sum\(m\) needs an IntType or LongType field"),
    ("sum(n),min(s),max(m),max(l)", r"max\(m\) needs .*MapType"),
])
def test_aggregation_configuration_mistakes_are_refused_with_the_reason(value, message):
    with pytest.raises(ConfigError, match=message) as e:
        IteratorChain.for_table(info({AGGREGATION: value}, MAP_LIST_SCHEMA))
    assert AGGREGATION in str(e.value)


def test_aggregation_refuses_list_fields():
    schema = Schema.from_dict({"rowKeyFields": [{"name": "key", "type": "LongType"}],
                               "valueFields": [{"name": "l", "type": {"ListType": {"elementType": "IntType"}}}]})
    with pytest.raises(ConfigError, match=r"max\(l\) needs .*ListType\(IntType\)"):
        IteratorChain.for_table(info({AGGREGATION: "max(l)"}, schema))


def test_aggregation_on_a_table_with_only_key_fields_is_refused():
    schema = Schema.from_dict({"rowKeyFields": [{"name": "key", "type": "LongType"}]})
    with pytest.raises(ConfigError, match="is a key field"):
        IteratorChain.for_table(info({AGGREGATION: "sum(key)"}, schema))


# ----- user iterators -----------------------------------------------------------------------

def plus_one(batch: pa.RecordBatch) -> pa.RecordBatch:
    i = batch.schema.get_field_index("count")
    return batch.set_column(i, batch.schema.field(i), pc.add(batch.column(i), 1))


def test_iterators_run_in_order_ageoff_property_iterator_extra_iterators_then_aggregation(samples):
    table = info({AGEOFF: "ts:100", PYTHON: "iterator_samples:times_ten", AGGREGATION: AGG})
    chain = IteratorChain.for_table(table, [plus_one], now_ms=1000, python_modules=MODULES)
    assert chain.describe() == (f"ageoff(ts, 100) | iterator_samples:times_ten | {__name__}:plus_one | "
                                "aggregation(sum(count), sum(small), min(name), max(blob))")
    rows = [row("a", ts=899, count=1000), row("a", ts=900, count=1), row("a", ts=900, count=2),
            row("b", ts=950, count=3)]
    # (1 * 10 + 1) + (2 * 10 + 1) = 32: times ten before plus one, both before the sum;
    # the aged-off record is gone before any of them
    out = run(chain, batches(rows, [2]))
    assert [(r["key"], r["ts"], r["count"]) for r in out] == [("a", 900, 32), ("b", 950, 31)]


def test_user_iterator_may_filter_rows_and_drop_whole_batches(samples):
    chain = IteratorChain.for_table(info({PYTHON: "iterator_samples:drop_odd_counts"}), python_modules=MODULES)
    rows = [row("a", count=1), row("b", count=2), row("c", count=3), row("d", count=4)]
    assert [r["key"] for r in run(chain, batches(rows, [1, 2]))] == ["b", "d"]
    chain = IteratorChain.for_table(info({PYTHON: "iterator_samples:drop_all", AGGREGATION: AGG}),
                                    python_modules=MODULES)
    assert run(chain, batches(rows, [2])) == []


def test_user_iterator_returning_a_nullable_copy_of_the_schema_is_accepted():
    def rebuilt(batch: pa.RecordBatch) -> pa.RecordBatch:
        return pa.RecordBatch.from_pydict(batch.to_pydict(), schema=pa.schema([(f.name, f.type) for f in TARGET]))
    chain = IteratorChain.for_table(info(), [rebuilt])
    rows = [row("a")]
    assert run(chain, batches(rows)) == rows


def test_user_iterator_returning_the_wrong_schema_is_an_error_naming_it(samples):
    chain = IteratorChain.for_table(info({PYTHON: "iterator_samples:wrong_schema"}), python_modules=MODULES)
    with pytest.raises(IteratorError, match="iterator_samples:wrong_schema returned schema"):
        run(chain, batches([row("a")]))


def test_user_iterator_returning_nulls_in_a_key_field_is_an_error():
    def null_keys(batch: pa.RecordBatch) -> pa.RecordBatch:
        return batch.set_column(0, TARGET.field(0), pa.nulls(batch.num_rows, pa.string()))
    chain = IteratorChain.for_table(info(), [null_keys])
    with pytest.raises(IteratorError, match="null_keys returned nulls in key field 'key'"):
        run(chain, batches([row("a")]))


def test_user_iterator_that_raises_is_an_iterator_error_naming_it():
    def broken(batch: pa.RecordBatch) -> pa.RecordBatch:
        raise ValueError("boom")
    chain = IteratorChain.for_table(info(), [broken])
    with pytest.raises(IteratorError, match=r"broken failed: ValueError\('boom'\)") as e:
        run(chain, batches([row("a")]))
    assert isinstance(e.value.__cause__, ValueError)
    assert pickle.loads(pickle.dumps(e.value)).args == e.value.args


def test_user_iterator_returning_something_else_is_an_error():
    chain = IteratorChain.for_table(info(), [lambda b: b.to_pydict()])
    with pytest.raises(IteratorError, match="returned dict; expected a pyarrow.RecordBatch or None"):
        run(chain, batches([row("a")]))


@pytest.mark.parametrize("value, message", [
    ("no_such_module_for_sleeper:fn", "cannot import module 'no_such_module_for_sleeper'"),
    ("iterator_samples:missing", "has no attribute 'missing'"),
    ("iterator_samples:NOT_CALLABLE", "'NOT_CALLABLE' is not callable"),
])
def test_user_iterator_that_cannot_be_loaded_is_a_config_error_naming_the_property(samples, value, message):
    with pytest.raises(ConfigError, match=message) as e:
        IteratorChain.for_table(info({PYTHON: value}), python_modules=MODULES)
    assert PYTHON in str(e.value)


@pytest.mark.parametrize("value", ["iterator_samples_other:fn", "os:system", "builtins:print"])
def test_user_iterator_from_a_module_not_allowed_is_refused_naming_the_setting_before_importing_it(samples, value):
    with pytest.raises(ConfigError, match="iterators.python_modules") as e:
        IteratorChain.for_table(info({PYTHON: value}), python_modules=MODULES)
    assert PYTHON in str(e.value) and "table 't'" in str(e.value)
    with pytest.raises(ConfigError, match="none: no Python iterator is allowed"):
        IteratorChain.for_table(info({PYTHON: "iterator_samples:times_ten"}))  # the default allows none


@pytest.mark.parametrize("module, allowed, ok", [
    ("acme.iterators", ("acme.iterators",), True), ("acme.iterators.clean", ("acme.iterators",), True),
    ("acme.iteratorsx", ("acme.iterators",), False), ("acme", ("acme.iterators",), False),
    ("acme.iterators", (), False), ("b", ("a", "b"), True),
])
def test_an_allowed_module_allows_itself_and_its_submodules_only(module, allowed, ok):
    from sleeper_ops.engine.user_iterators import module_allowed

    assert module_allowed(module, allowed) is ok


def test_input_that_does_not_fit_the_schema_is_refused():
    chain = IteratorChain.for_table(info({AGGREGATION: AGG}))
    with pytest.raises(IteratorError, match="does not fit table 't'"):
        list(chain.apply([pa.RecordBatch.from_pydict({"key": ["a"]})]))


def test_chain_pickles_and_rebuilds_with_the_same_iterators_and_clock(samples):
    table = info({AGEOFF: "ts:100", PYTHON: "iterator_samples:times_ten", AGGREGATION: AGG})
    chain = IteratorChain.for_table(table, [plus_one], now_ms=1000, python_modules=MODULES)
    copy = pickle.loads(pickle.dumps(chain))
    assert copy.describe() == chain.describe()
    rows = [row("a", ts=899), row("a", ts=900, count=2), row("b", ts=901)]
    assert run(copy, batches(rows, [1])) == run(chain, batches(rows, [1]))


# ----- aggregation against a Python reference -------------------------------------------------

def reference_aggregate(rows: list[dict], ops: dict[str, str], keys: Sequence[str]) -> list[dict]:
    out: dict[tuple, dict] = {}
    for r in rows:
        k = tuple(r[n] for n in keys)
        if k not in out:
            out[k] = dict(r)
            continue
        acc = out[k]
        for f, op in ops.items():
            a, b = acc[f], r[f]
            if a is None or b is None:
                acc[f] = b if a is None else a
            else:
                acc[f] = a + b if op == "sum" else (min(a, b) if op == "min" else max(a, b))
    return list(out.values())


RANDOM_OPS = {"count": "sum", "small": "max", "name": "min", "blob": "max"}
random_rows = st.lists(
    st.fixed_dictionaries({
        "key": st.text(alphabet="abé", max_size=3),
        "ts": st.integers(0, 5),
        "count": st.one_of(st.none(), st.integers(-(2**40), 2**40)),
        "small": st.one_of(st.none(), st.integers(-(2**31), 2**31 - 1)),
        "name": st.one_of(st.none(), st.text(max_size=3)),
        "blob": st.one_of(st.none(), st.binary(max_size=3)),
    }),
    max_size=300,
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(rows=random_rows, data=st.data())
def test_aggregation_matches_a_python_reference_on_random_batches(rows, data):
    rows.sort(key=lambda r: (r["key"].encode(), r["ts"]))
    cuts = sorted(data.draw(st.lists(st.integers(0, len(rows)), max_size=6), label="cuts"))
    chain = IteratorChain.for_table(info({AGGREGATION: ",".join(f"{op}({f})" for f, op in RANDOM_OPS.items())}))
    got = run(chain, batches(rows, cuts))
    assert got == reference_aggregate(rows, RANDOM_OPS, SCHEMA.key_names)


# ----- the deployment's allow-list (iterators.python_modules) ----------------------------------

def test_the_allow_list_is_read_from_the_configuration_checked_and_round_trips(tmp_path):
    from sleeper_ops.config import SleeperConfig

    assert SleeperConfig.from_dict(tmp_path, {}).python_iterator_modules == ()
    config = SleeperConfig.from_dict(tmp_path, {"iterators": {"python_modules": ["acme.iterators", "b"]}})
    assert config.python_iterator_modules == ("acme.iterators", "b")
    assert SleeperConfig.from_dict(tmp_path, config.to_dict()) == config
    for bad in ("acme", ["os; rm"], [1], ["acme:fn"]):
        with pytest.raises(ConfigError, match="iterators.python_modules"):
            SleeperConfig.from_dict(tmp_path, {"iterators": {"python_modules": bad}})


def test_a_compaction_of_a_table_with_an_iterator_outside_the_list_fails_before_any_job_is_created(
        sleeper, samples):
    """The whole run fails in one line naming the table (no job assigned, nothing to retry);
    an offline table is still skipped."""
    t = sleeper.create_table("t", SCHEMA)
    for i in range(2):
        t.ingest(pa.Table.from_pylist([row(f"k{i}")], schema=TARGET))
    sleeper.state_store.update_properties("t", {PYTHON: "iterator_samples:times_ten"})
    with pytest.raises(ConfigError, match="table 't'.*iterators.python_modules"):
        t.compact()
    assert t.jobs(kind="compaction") == []
    assert not any(r.job_id for r in t.state().references.values()), "no file assigned to a job"
    sleeper.state_store.update_properties("t", {"sleeper.table.online": "false"})
    assert t.compact().skipped_reason == "table is offline"
