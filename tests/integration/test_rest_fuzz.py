"""Fuzzing the REST API with schemathesis: every operation of its OpenAPI schema, with
generated valid and invalid inputs, against the app mounted at ``/sleeper/api/v1`` (as
the Airflow plugin mounts it) over a Sleeper on PostgreSQL with one small table.

DESIGN.md section 5: "Bad input gets 4xx with a message; a 500 is a bug". So no
response may be a 5xx, and every 4xx carries ``{"detail": message}`` with a non-empty
message. Half the generated requests name the existing table, so the routes get past
the table lookup. Requests go through the in-process ASGI transport.
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path
from typing import Any, Iterator, Optional

import pyarrow as pa
import pytest
import schemathesis
from fastapi import FastAPI
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

from sleeper_ops import Sleeper
from sleeper_ops.web.rest import create_app

with warnings.catch_warnings():
    warnings.filterwarnings("ignore", "Using `httpx` with `starlette.testclient`")
    import starlette.testclient  # noqa: F401  (schemathesis's ASGI transport imports it)

PREFIX = "/sleeper/api/v1"
TABLE = "events"
SCHEMA = {
    "rowKeyFields": [{"name": "key", "type": "StringType"}],
    "sortKeyFields": [{"name": "ts", "type": "LongType"}],
    "valueFields": [{"name": "blob", "type": "ByteArrayType"},
                    {"name": "tags", "type": {"MapType": {"keyType": "StringType", "valueType": "LongType"}}}],
}


class Served:
    """The Sleeper the app serves, set by the fixture for each test."""

    sleeper: Optional[Sleeper] = None

    def __call__(self) -> Sleeper:
        assert self.sleeper is not None, "the served_sleeper fixture sets it"
        return self.sleeper


served = Served()
app = FastAPI()
app.mount(PREFIX, create_app(served))
schema = schemathesis.openapi.from_asgi(f"{PREFIX}/openapi.json", app)


@schema.hook
def flatmap_case(context: Any, case: Any) -> Any:
    """Half the cases name the existing table (the other half a generated name)."""
    if not case.path_parameters or "t" not in case.path_parameters:
        return st.just(case)

    def on_table(yes: bool) -> Any:
        if yes:
            case.path_parameters = {**case.path_parameters, "t": TABLE}
        return case
    return st.booleans().map(on_table)


@pytest.fixture
def served_sleeper(pg_dsn: str, tmp_path: Path) -> Iterator[Sleeper]:
    home = tmp_path / "home"
    home.mkdir()
    (home / "sleeper.toml").write_text(f'[state_store]\ndsn = "{pg_dsn}"\n[object_store]\nuri = "data"\n')
    with Sleeper(home) as s:
        t = s.create_table(TABLE, SCHEMA, split_points=["m"])
        t.ingest(pa.table({"key": ["a", "q", "z"], "ts": pa.array([1, 2, 3], pa.int64()),
                           "blob": pa.array([b"x", b"y", None], pa.binary()),
                           "tags": pa.array([[("n", 1)], None, []], pa.map_(pa.string(), pa.int64()))}))
        served.sleeper = s
        try:
            yield s
        finally:
            served.sleeper = None


def check(response: Any, case: Any) -> None:
    where = f"{case.method} {case.formatted_path} {case.query or ''} {str(case.body)[:200]}"
    assert response.status_code < 500, f"{where}: {response.status_code} {response.text[:1000]}"
    if 400 <= response.status_code < 500:
        try:
            body = json.loads(response.content)
        except ValueError:
            pytest.fail(f"{where}: {response.status_code} with a body that is not JSON: {response.text[:300]}")
        detail = body.get("detail") if isinstance(body, dict) else None
        assert isinstance(detail, str) and detail.strip(), \
            f"{where}: {response.status_code} without a detail message: {response.text[:300]}"


def test_the_schema_is_the_rest_apps_whole_schema() -> None:
    paths = {op.ok().path for op in schema.get_all_operations()}
    assert {"/tables", "/tables/{t}", "/tables/{t}/records", "/tables/{t}/ingest-requests",
            "/tables/{t}/partitions", "/tables/{t}/files", "/tables/{t}/jobs"} <= paths


@schema.parametrize()
@settings(max_examples=100, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much,
                                 HealthCheck.function_scoped_fixture])
def test_no_request_gets_a_5xx_and_every_4xx_has_a_message(case: Any, served_sleeper: Sleeper) -> None:
    response = case.call()
    check(response, case)
