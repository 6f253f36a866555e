"""The table status page's renderers and app, over the in-memory state store."""

from __future__ import annotations

import re
import warnings

import pyarrow as pa
import pytest
from fastapi import Request

from sleeper_ops.reports import partitions_report
from sleeper_ops.web.status_charts import jobs_chart_svg, leaf_records_svg
from sleeper_ops.web.status_page import create_status_app
from sleeper_ops.web.status_render import TableSummary, render_index, render_table
from statestore.jobs import JobRecord
from statestore.overview import overview_of
from statestore.partitions import partitions_from_split_points
from statestore.schema import Schema

SCHEMA = {"rowKeyFields": [{"name": "key", "type": "StringType"}],
          "valueFields": [{"name": "value", "type": "StringType"}]}


def _rows(n: int, seed: int) -> pa.Table:
    return pa.table({"key": [f"k{(i * 31 + seed) % 1000:04d}" for i in range(n)],
                     "value": [f"v{i}" for i in range(n)]})


@pytest.fixture
def table(sleeper):
    t = sleeper.create_table("events", SCHEMA, split_points=["k0500"], properties={
        "sleeper.table.partition.splitting.threshold": "300", "sleeper.table.compaction.strategy": "basic"})
    for seed in range(3):
        t.ingest(_rows(400, seed))
    t.split()
    t.compact()
    return t


def test_table_page_shows_every_partition_and_the_jobs(table) -> None:
    state, jobs = table.state(), table.jobs()
    page = render_table(table.info, overview_of(state), jobs)
    for pid in state.partitions:
        assert pid in page
    assert {j.kind for j in jobs} == {"split", "compaction", "ingest"}
    assert page.count("<svg") == 3
    assert "1,200</b>records" in page
    assert "split on key" in page


def test_the_table_page_links_every_dag_of_the_table(sleeper) -> None:
    t = sleeper.create_table("events", SCHEMA)
    page = render_table(t.info, overview_of(t.state()), [])
    for op in ("split", "compaction", "gc", "ingest_batcher", "flush"):
        assert f"/dags/sleeper_events_{op}'" in page
    assert "_bulk_import" not in page
    sleeper.set_properties("events", {"sleeper.table.bulk.import.source": "s3://raw/{{ ds }}/"})
    assert "/dags/sleeper_events_bulk_import'" in render_table(sleeper.table("events").info, overview_of(t.state()), [])


def test_names_and_reasons_are_escaped(sleeper) -> None:
    # a name from before table names were checked (the state store itself takes any name)
    schema = Schema.from_dict(SCHEMA)
    sleeper.state_store.create_table("<script>alert(1)</script>", schema, partitions_from_split_points(schema, []))
    t = sleeper.table("<script>alert(1)</script>")
    failed = JobRecord.created(t.info.table_id, "j1", "compaction").started("r").failed("<b>boom</b>")
    page = render_table(t.info, overview_of(t.state()), [failed])
    assert "<script>alert" not in page and "&lt;script&gt;" in page
    assert "<b>boom</b>" not in page and "&lt;b&gt;boom&lt;/b&gt;" in page
    index = render_index([TableSummary.of(t.info, overview_of(t.state()), [failed])])
    assert "<script>alert" not in index and "tables/%3Cscript%3Ealert%281%29%3C%2Fscript%3E" in index


def test_jobs_chart_stacks_jobs_by_kind_and_marks_failures() -> None:
    t0 = 1_700_000_000_000
    jobs = [JobRecord("t", f"c{i}", "compaction", "committed", created_ms=t0 + i) for i in range(3)]
    jobs.append(JobRecord("t", "s", "split", "committed", created_ms=t0))
    jobs.append(JobRecord("t", "f", "compaction", "failed", created_ms=t0))
    svg = jobs_chart_svg(jobs, now=t0 + 60_000)
    titles = re.findall(r"<title>[^<]*: (\d+) (\w+)</title>", svg)
    assert sorted(titles) == [("1", "failed"), ("1", "split"), ("3", "compaction")]
    assert "No jobs" in jobs_chart_svg([], now=t0)


def test_leaf_chart_has_one_bar_per_leaf_and_the_threshold(table) -> None:
    rows = partitions_report(table.state())
    svg = leaf_records_svg(rows, 300)
    assert svg.count("<rect") == sum(1 for r in rows if r["leaf"])
    assert "split threshold 300" in svg


def test_app_serves_pages_and_refuses_with_an_html_page(sleeper, table) -> None:
    from fastapi import HTTPException

    with warnings.catch_warnings():
        # Starlette 1.x asks for httpx2 instead of httpx (a warning at import); httpx works.
        warnings.filterwarnings("ignore", "Using `httpx` with `starlette.testclient`")
        from fastapi.testclient import TestClient

    def auth(request: Request) -> None:
        if request.headers.get("x-user") != "admin":
            raise HTTPException(401, "Not authenticated")

    client = TestClient(create_status_app(lambda: sleeper, auth_dependency=auth))
    refused = client.get("/")
    assert refused.status_code == 401 and "Sign in to Airflow" in refused.text and "events" not in refused.text
    ok = client.get("/", headers={"x-user": "admin"})
    assert ok.status_code == 200 and "href='tables/events'" in ok.text
    assert client.get("/tables/events", headers={"x-user": "admin"}).status_code == 200
    assert client.get("/tables/missing", headers={"x-user": "admin"}).status_code == 404


def test_the_table_page_lists_at_most_the_sample_and_says_how_many_files_there_are(sleeper) -> None:
    from sleeper_ops.web.status_render import MAX_FILE_ROWS

    t = sleeper.create_table("many", SCHEMA)
    for i in range(3):
        t.ingest(pa.table({"key": [f"k{i}"], "value": ["v"]}))
    page = render_table(t.info, sleeper.state_store.overview(t.info.table_id, file_limit=2), [])
    assert "3 files, 3 references, 0 unreferenced" in page
    assert "showing the first 2 of 3 files" in page
    assert page.count("partition_root/") == 2 and MAX_FILE_ROWS >= 2


def test_the_index_lists_only_the_tables_the_requester_may_read(sleeper, table) -> None:
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "Using `httpx` with `starlette.testclient`")
        from fastapi.testclient import TestClient

    sleeper.create_table("secret", SCHEMA)

    def readable(request: Request, names):  # type: ignore[no-untyped-def]
        return [n for n in names if n != "secret" or request.headers.get("x-user") == "admin"]

    client = TestClient(create_status_app(lambda: sleeper, table_filter=readable))
    viewer = client.get("/", headers={"x-user": "viewer"})
    assert viewer.status_code == 200 and "href='tables/events'" in viewer.text and "secret" not in viewer.text
    assert "href='tables/secret'" in client.get("/", headers={"x-user": "admin"}).text


def _client(sleeper, **kwargs):  # type: ignore[no-untyped-def]
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "Using `httpx` with `starlette.testclient`")
        from fastapi.testclient import TestClient
    return TestClient(create_status_app(lambda: sleeper, **kwargs))


def test_walk_finding_1_a_table_whose_dags_cannot_be_built_is_marked_red_with_the_reason(sleeper) -> None:
    """Issue 34 finding 1: the page showed nothing wrong and linked to DAGs that did not
    exist. It asks the DAG factory's own check, as the Airflow plugin wires it."""
    from sleeper_ops.orchestration.dag_factory import table_dags_problem

    sleeper.create_table("events", SCHEMA)
    old = "t" * 150  # a name from before the rule (the state store takes any name)
    schema = Schema.from_dict(SCHEMA)
    sleeper.state_store.create_table(old, schema, partitions_from_split_points(schema, []))
    client = _client(sleeper, dag_problem=table_dags_problem)
    index = client.get("/").text
    assert index.count("<span class='badge failed'>DAGs cannot be built</span>") == 1
    assert f"table &#x27;{old}&#x27; has a name outside the rule" in index
    assert index.index("DAGs cannot be built") > index.index(f"href='tables/{old}'")  # on the old table's row
    page = client.get(f"/tables/{old}").text
    assert "DAGs cannot be built" in page and f"sleeper table rename {old} NEW_NAME" in page
    assert f"/dags/sleeper_{old}_" not in page  # no link to DAGs that do not exist
    fine = client.get("/tables/events").text
    assert "DAGs cannot be built" not in fine and "/dags/sleeper_events_gc'" in fine


def test_walk_finding_8_a_long_table_name_is_cut_with_the_whole_name_in_its_title(sleeper) -> None:
    """Issue 34 finding 8: a long name pushed the index's columns off screen (the browser
    test measures it: tests/integration/test_airflow_live.py)."""
    name = "W" * 94
    t = sleeper.create_table(name, SCHEMA)
    index = render_index([TableSummary.of(t.info, overview_of(t.state()), [])])
    assert f"<a class='name' title='{name}' href='tables/{name}'>{name}</a>" in index
    assert re.search(r"a\.name \{[^}]*max-width: 36ch;[^}]*text-overflow: ellipsis;", index)
