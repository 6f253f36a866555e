"""Split points between two keys: the shortest value above one and at most the other,
checked against a brute-force model over every prefix (hypothesis)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from sleeper_ops.engine.separators import separator


def _model(below, at):  # type: ignore[no-untyped-def]
    """Every prefix of ``at`` (and ``at``) above ``below``, the shortest first."""
    return min((at[:n] for n in range(len(at) + 1) if at[:n] > below), key=len)


@given(st.text(alphabet="ab\x00é\U0001F600", max_size=8), st.text(alphabet="ab\x00é\U0001F600", max_size=8))
def test_a_string_separator_lies_between_the_keys_and_is_the_shortest_prefix(a, b) -> None:  # type: ignore[no-untyped-def]
    if a == b:
        return
    below, at = min(a, b), max(a, b)
    s = separator(below, at)
    assert below < s <= at and at.startswith(s)
    assert s == _model(below, at)


@given(st.binary(max_size=8), st.binary(max_size=8))
def test_a_bytes_separator_lies_between_the_keys(a, b) -> None:  # type: ignore[no-untyped-def]
    if a == b:
        return
    below, at = min(a, b), max(a, b)
    s = separator(below, at)
    assert below < s <= at and at.startswith(s) and s == _model(below, at)


def test_examples() -> None:
    assert separator("alice@x.org", "bob@y.org") == "b"
    assert separator("u000004@erase.example", "u000005@erase.example") == "u000005"
    assert separator("abc", "abcd") == "abcd"  # no shorter value between them
    assert separator(None, "kiwi") == "kiwi"
    assert separator(4, 5) == 5 and separator(1, 100) == 100  # numbers stay as they are
