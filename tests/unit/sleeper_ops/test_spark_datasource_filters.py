"""The Spark data source's filter pushdown, without Spark: a filter it takes becomes key
intervals holding exactly the keys the filter accepts (brute force over small domains);
filters it cannot take exactly go back to Spark."""

from __future__ import annotations

import itertools
import random

from pyspark.sql.datasource import (
    EqualTo,
    GreaterThan,
    GreaterThanOrEqual,
    In,
    IsNotNull,
    LessThan,
    LessThanOrEqual,
    Not,
    StringStartsWith,
)

from sleeper_ops.spark import datasource as ds
from statestore.schema import Schema


def reader(key_type: str):  # type: ignore[no-untyped-def]
    schema = Schema.from_dict({"rowKeyFields": [{"name": "key", "type": key_type}],
                               "valueFields": [{"name": "v", "type": "StringType"}]})
    return ds.SleeperReader("t", "/nowhere", {}, schema)


def inside(intervals, k) -> bool:  # type: ignore[no-untyped-def]
    return any(lo <= k and (hi is None or k < hi) for lo, hi in intervals)


def pushed(r, filters):  # type: ignore[no-untyped-def]
    left = list(r.pushFilters(filters))
    return left, r.intervals


def test_string_filters_become_intervals_holding_exactly_the_accepted_keys():
    rnd = random.Random(3)
    alphabet = ["", "a", "b", "\x00", "\x7f", "é", "\U0010fffe"]
    keys = sorted({"".join(p) for n in range(4) for p in itertools.product(alphabet, repeat=n)})
    for _ in range(300):
        v = rnd.choice(keys)
        cases = [(EqualTo(("key",), v), lambda k, v=v: k == v), (GreaterThan(("key",), v), lambda k, v=v: k > v),
                 (GreaterThanOrEqual(("key",), v), lambda k, v=v: k >= v),
                 (LessThan(("key",), v), lambda k, v=v: k < v), (LessThanOrEqual(("key",), v), lambda k, v=v: k <= v)]
        if v:
            cases.append((StringStartsWith(("key",), v), lambda k, v=v: k.startswith(v)))
        f, accepts = rnd.choice(cases)
        g, accepts2 = rnd.choice(cases)
        left, intervals = pushed(reader("StringType"), [f, g])
        assert left == []
        wrong = [k for k in keys if inside(intervals, k) != (accepts(k) and accepts2(k))]
        assert not wrong, (f, g, intervals, wrong[:5])


def test_long_filters_are_exact_at_the_ends_of_the_type():
    top, bottom = 2**63 - 1, -(2**63)
    keys = [bottom, bottom + 1, -1, 0, 1, top - 1, top]
    for v, cls in itertools.product(keys, (EqualTo, GreaterThan, GreaterThanOrEqual, LessThan, LessThanOrEqual)):
        left, intervals = pushed(reader("LongType"), [cls(("key",), v)])
        ops = {EqualTo: v.__eq__, GreaterThan: v.__lt__, GreaterThanOrEqual: v.__le__, LessThan: v.__gt__,
               LessThanOrEqual: v.__ge__}
        assert left == [] and [inside(intervals, k) for k in keys] == [ops[cls](k) for k in keys], (cls, v)
    left, intervals = pushed(reader("LongType"), [In(("key",), (5, 3, 5))])
    assert left == [] and intervals == [(3, 4), (5, 6)]


def test_filters_not_taken_exactly_go_back_to_spark_and_restrict_nothing():
    r = reader("LongType")
    others = [EqualTo(("v",), "x"), Not(EqualTo(("key",), 1)), IsNotNull(("key",)), EqualTo(("key",), "1"),
              EqualTo(("key",), True), In(("key",), (1, "a")), StringStartsWith(("key",), "1")]
    left, intervals = pushed(r, others)
    assert left == others
    assert intervals == [(-(2**63), None)]
