"""Key intervals from SQL predicates, against brute force: every key a predicate accepts
lies in the intervals (pruning never loses a row), and for predicates made only of key
comparisons, ``IN`` and ``BETWEEN`` the intervals hold exactly the accepted keys.

Predicates are random SQL over a small key domain, planned by DataFusion (whose
optimizer rewrites them, as it does for real statements); the test evaluates each
predicate in Python on every key of the domain.
"""

from __future__ import annotations

from typing import Any, Callable, Optional

import pyarrow as pa
import pyarrow.dataset as ds
from datafusion import SessionContext
from hypothesis import given, settings
from hypothesis import strategies as st

from sleeper_ops.query.sql_keys import key_intervals, key_intervals_exact, union
from statestore.schema import Schema

SCHEMA = Schema.from_dict({"rowKeyFields": [{"name": "key", "type": "IntType"}],
                           "valueFields": [{"name": "v", "type": "IntType"}]})
DOMAIN = range(-6, 26)
_CTX = SessionContext()
_CTX.register_dataset("t", ds.dataset([], schema=pa.schema([("key", pa.int32()), ("v", pa.int32())])))

Pred = tuple[str, Callable[[int, int], bool], bool]  # SQL, Python, made only of understood key predicates

_OPS: dict[str, Callable[[int, int], bool]] = {
    "=": lambda a, b: a == b, "<": lambda a, b: a < b, "<=": lambda a, b: a <= b,
    ">": lambda a, b: a > b, ">=": lambda a, b: a >= b, "<>": lambda a, b: a != b}
values = st.integers(min_value=-3, max_value=22)


@st.composite
def atoms(draw: Any) -> Pred:
    kind = draw(st.sampled_from(["cmp", "flipped", "in", "between", "value", "not"]))
    a, b = draw(values), draw(values)
    if kind == "cmp":
        op = draw(st.sampled_from(sorted(_OPS)))
        return f"key {op} {a}", lambda k, v, op=op, a=a: _OPS[op](k, a), op != "<>"
    if kind == "flipped":
        op = draw(st.sampled_from(sorted(_OPS)))
        return f"{a} {op} key", lambda k, v, op=op, a=a: _OPS[op](a, k), op != "<>"
    if kind == "in":
        items = draw(st.lists(values, min_size=1, max_size=6))
        return f"key IN ({', '.join(map(str, items))})", lambda k, v, items=items: k in items, True
    if kind == "between":
        return f"key BETWEEN {a} AND {b}", lambda k, v, a=a, b=b: a <= k <= b, True
    if kind == "value":
        return f"v > {a}", lambda k, v, a=a: v > a, False
    return f"NOT (key < {a})", lambda k, v, a=a: not k < a, False


def combine(children: Any) -> Any:
    def node(pair: tuple[Pred, Pred], op: str) -> Pred:
        (s1, f1, e1), (s2, f2, e2) = pair
        if op == "AND":
            return f"({s1} AND {s2})", lambda k, v: f1(k, v) and f2(k, v), e1 and e2
        return f"({s1} OR {s2})", lambda k, v: f1(k, v) or f2(k, v), e1 and e2
    return st.builds(node, st.tuples(children, children), st.sampled_from(["AND", "OR"]))


predicates = st.recursive(atoms(), combine, max_leaves=6)


def scan_filters(predicate: str) -> Optional[list[Any]]:
    """The filters DataFusion pushes into the scan of ``t``; None when the optimizer
    proved the predicate false and left no scan."""
    plan = _CTX.sql(f"SELECT * FROM t WHERE {predicate}").optimized_logical_plan()
    stack = [plan]
    while stack:
        node = stack.pop()
        v = node.to_variant()
        if type(v).__name__ == "TableScan":
            return list(v.filters())
        stack.extend(node.inputs())
    return None


def covered(intervals: list[tuple[Any, Any]], k: int) -> bool:
    return any(lo <= k and (hi is None or k < hi) for lo, hi in intervals)


@settings(max_examples=300, deadline=None)
@given(predicates)
def test_intervals_hold_every_accepted_key_and_only_those_when_the_predicate_is_on_the_key(pred):
    sql, accepts, exact = pred
    filters = scan_filters(sql)
    if filters is None:
        assert not any(accepts(k, v) for k in DOMAIN for v in (-10, 0, 10, 30)), f"{sql}: planned as empty"
        return
    intervals = key_intervals(SCHEMA, filters)
    assert intervals == union(intervals, []), f"{sql}: intervals not sorted and disjoint: {intervals}"
    for k in DOMAIN:
        if any(accepts(k, v) for v in (-10, 0, 10, 30)):
            assert covered(intervals, k), f"{sql}: key {k} is accepted but outside {intervals}"
        elif exact:
            assert not covered(intervals, k), f"{sql}: key {k} is rejected but inside {intervals}"


@settings(max_examples=300, deadline=None)
@given(predicates)
def test_intervals_said_exact_hold_only_accepted_keys_and_every_key_predicate_is_said_exact(pred):
    """Soundness of the exact flag (the scan then skips its filter): a key in intervals
    said exact is accepted whatever its row's other fields. Completeness: a predicate made
    only of key comparisons, IN and BETWEEN is said exact."""
    sql, accepts, made_of_key_predicates = pred
    filters = scan_filters(sql)
    if filters is None:
        return
    intervals, exact = key_intervals_exact(SCHEMA, filters)
    assert intervals == key_intervals(SCHEMA, filters)
    if made_of_key_predicates:
        assert exact, f"{sql}: made of key predicates, not said exact ({filters})"
    if exact:
        for k in DOMAIN:  # every row of a key inside is accepted, every row of a key outside rejected
            answers = {accepts(k, v) for v in (-10, 0, 10, 30)}
            assert answers == {covered(intervals, k)}, f"{sql}: said exact, but key {k} gets {answers} ({intervals})"


def test_extremes_of_the_key_type_and_predicates_that_restrict_nothing():
    def intervals(predicate: str) -> list[tuple[Any, Any]]:
        filters = scan_filters(predicate)
        assert filters is not None
        return key_intervals(SCHEMA, filters)
    assert intervals("v = 3") == [(-(2**31), None)]
    assert intervals("key <> 3") == [(-(2**31), None)]
    assert intervals("key = 2147483647") == [(2**31 - 1, None)]
    assert intervals("key <= 2147483647") == [(-(2**31), None)]
    assert intervals("key < -2147483648") == []
