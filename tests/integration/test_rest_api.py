"""The REST app (DESIGN.md section 5) over a Sleeper on the embedded PostgreSQL, through
FastAPI's TestClient: every route, its errors, and nothing half-applied."""

from __future__ import annotations

import base64
import json
import warnings
from pathlib import Path
from typing import Iterator

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from fastapi import Header, HTTPException

from sleeper_ops import Sleeper
from sleeper_ops.ingest.batcher import run_ingest_batcher
from sleeper_ops.io.storage import ObjectStore
from sleeper_ops.web.rest import LazySleeper, create_app
from statestore.postgres import PostgresStateStore

with warnings.catch_warnings():
    # Starlette 1.x asks for httpx2 instead of httpx (a UserWarning at import); httpx works.
    warnings.filterwarnings("ignore", "Using `httpx` with `starlette.testclient`")
    from fastapi.testclient import TestClient

SCHEMA = {
    "rowKeyFields": [{"name": "key", "type": "StringType"}],
    "sortKeyFields": [{"name": "ts", "type": "LongType"}],
    "valueFields": [{"name": "blob", "type": "ByteArrayType"},
                    {"name": "tags", "type": {"MapType": {"keyType": "StringType", "valueType": "LongType"}}},
                    {"name": "items", "type": {"ListType": {"elementType": "StringType"}}}],
}
LONG_SCHEMA = {"rowKeyFields": [{"name": "id", "type": "LongType"}],
               "valueFields": [{"name": "v", "type": "StringType"}]}


def b64(b: bytes) -> str:
    return base64.b64encode(b).decode()


def rec(key: str, ts: int = 1) -> dict:
    return {"key": key, "ts": ts, "blob": b64(key.encode()), "tags": {"n": len(key)}, "items": [key, key]}


@pytest.fixture
def sleeper(pg_dsn: str, tmp_path: Path) -> Iterator[Sleeper]:
    s = Sleeper(state_store=PostgresStateStore(pg_dsn), objects=ObjectStore(str(tmp_path / "data")))
    s.create_table("events", SCHEMA, split_points=["m"],
                   properties={"sleeper.table.ingest.batcher.job.min.size": "1"})
    s.create_table("numbers", LONG_SCHEMA)
    yield s
    s.close()


@pytest.fixture
def inbox(tmp_path: Path) -> Path:
    """The directory the client fixture's app allows ingest requests from."""
    d = tmp_path / "inbox"
    d.mkdir()
    return d


@pytest.fixture
def client(sleeper: Sleeper, inbox: Path) -> Iterator[TestClient]:
    with TestClient(create_app(lambda: sleeper, ingest_prefixes=[str(inbox)])) as c:
        yield c


def records_in(sleeper: Sleeper, table: str) -> int:
    return sum(r.record_count for r in sleeper.table(table).state().references.values())


# ----- tables and reports -----------------------------------------------------------------
def test_list_and_describe_tables(client: TestClient) -> None:
    r = client.get("/tables")
    assert r.status_code == 200
    assert [(t["name"], t["online"]) for t in r.json()] == [("events", True), ("numbers", True)]
    t = client.get("/tables/events").json()
    assert t["schema"]["rowKeyFields"] == [{"name": "key", "type": "StringType"}]
    assert t["properties"]["sleeper.table.ingest.batcher.job.min.size"] == "1"
    assert t["properties"]["sleeper.table.compaction.strategy"] == "sizeratio", "defaults are shown"
    assert t["properties_set"] == ["sleeper.table.ingest.batcher.job.min.size"]


def test_unknown_table_is_404_with_a_message_on_every_route(client: TestClient) -> None:
    for method, path, body in [("GET", "/tables/nope", None), ("GET", "/tables/nope/partitions", None),
                               ("GET", "/tables/nope/files", None), ("GET", "/tables/nope/jobs", None),
                               ("GET", "/tables/nope/records?key=%22a%22", None),
                               ("GET", "/tables/nope/ingest-requests", None),
                               ("POST", "/tables/nope/records", {"records": [rec("a")]}),
                               ("POST", "/tables/nope/ingest-requests", {"files": ["/x.parquet"]})]:
        r = client.request(method, path, json=body)
        assert r.status_code == 404, (method, path, r.text)
        assert "nope" in r.json()["detail"]


def test_partitions_files_and_jobs_reports(client: TestClient, sleeper: Sleeper) -> None:
    parts = client.get("/tables/events/partitions").json()
    assert parts["next"] is None
    parts = parts["partitions"]
    assert [(p["depth"], p["leaf"]) for p in parts] == [(0, False), (1, True), (1, True)]
    assert parts[1]["region"][0]["field"] == "key"
    assert client.get("/tables/events/files").json() == {"files": [], "next": None}
    client.post("/tables/events/records", json={"records": [rec("a"), rec("z")]})
    sleeper.table("events").flush()
    parts = client.get("/tables/events/partitions").json()["partitions"]
    assert sorted(p["records"] for p in parts if p["leaf"]) == [1, 1]
    files = client.get("/tables/events/files").json()["files"]  # the flush's one file, shared by both leaves
    assert len(files) == 1 and [r["records"] for r in files[0]["references"]] == [1, 1]
    assert client.get("/tables/events/jobs", params={"kind": "compaction"}).json() == []
    jobs = client.get("/tables/events/jobs").json()
    assert [(j["kind"], j["status"]) for j in jobs] == [("flush", "committed")], "the one flush, listed"
    assert client.get("/tables/events/jobs?kind=nonsense").status_code == 400


def _pages(client: TestClient, path: str, key: str, limit: int) -> list[list[dict]]:
    pages, token = [], None
    while True:
        r = client.get(path, params={"limit": limit, **({"next": token} if token else {})})
        assert r.status_code == 200, r.text
        pages.append(r.json()[key])
        token = r.json()["next"]
        if token is None:
            return pages


def test_partitions_and_files_are_paged_with_limit_and_next(client: TestClient, sleeper: Sleeper,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    t = sleeper.create_table("paged", LONG_SCHEMA, split_points=list(range(10, 100, 10)))
    for i in range(7):  # each ingest one file shared by the 10 leaves
        t.ingest(pa.table({"id": pa.array(range(i, 100, 7), pa.int64()), "v": ["x"] * len(range(i, 100, 7))}))
    every_file = sorted(f.filename for f in t.state().file_statuses())
    # no page reads the whole state
    monkeypatch.setattr(sleeper.state_store, "load_state", lambda *a: pytest.fail("a page loaded the whole state"))
    pages = _pages(client, "/tables/paged/files", "files", 2)
    assert [len(p) for p in pages] == [2, 2, 2, 1]
    assert all(len(f["references"]) == 10 for p in pages for f in p)
    assert [f["filename"] for p in pages for f in p] == every_file
    parts = _pages(client, "/tables/paged/partitions", "partitions", 4)
    assert [len(p) for p in parts] == [4, 4, 4, 4, 3]  # 19 partitions: a root, 8 inner, 10 leaves
    assert len({p["id"] for page in parts for p in page}) == 19
    assert sum(p["records"] for page in parts for p in page if p["leaf"]) == 100
    for path in ("/tables/paged/files", "/tables/paged/partitions"):
        bad = client.get(path, params={"next": "not-a-token"})
        assert bad.status_code == 400 and "pass the 'next' of the previous page" in bad.json()["detail"]
    other = client.get("/tables/paged/files", params={"limit": 1}).json()["next"]
    assert client.get("/tables/paged/partitions", params={"next": other}).status_code == 400
    assert client.get("/tables/paged/files", params={"limit": 10_001}).status_code == 422


# ----- records ----------------------------------------------------------------------------
def test_records_written_are_read_back_by_key_and_range(client: TestClient) -> None:
    r = client.post("/tables/events/records", json={"records": [rec("b", 2), rec("a"), rec("b", 1), rec("q")]})
    assert r.status_code == 201 and r.json()["records"] == 4 and r.json()["seq"] > 0
    got = client.get("/tables/events/records", params={"key": '"b"'}).json()
    assert got["count"] == 2 and not got["truncated"]
    assert got["records"] == [rec("b", 1), rec("b", 2)], "bytes as base64, maps as objects, sorted by sort key"
    both = client.get("/tables/events/records", params=[("key", '"a"'), ("key", '"q"')]).json()
    assert [x["key"] for x in both["records"]] == ["a", "q"]
    rng = client.get("/tables/events/records", params={"min": '"b"', "max": '"r"'}).json()
    assert [x["key"] for x in rng["records"]] == ["b", "b", "q"]
    open_ended = client.get("/tables/events/records", params={"min": '"b"', "max": "null"}).json()
    assert open_ended["count"] == 3
    assert client.get("/tables/events/records", params={"max": '"b"'}).json()["count"] == 1, "no min: from the start"
    limited = client.get("/tables/events/records", params={"min": '"a"', "limit": 2}).json()
    assert limited["count"] == 2 and limited["truncated"]


def test_integer_keys_and_json_arrays(client: TestClient) -> None:
    client.post("/tables/numbers/records", json={"records": [{"id": i, "v": f"v{i}"} for i in range(-5, 5)]})
    assert client.get("/tables/numbers/records?key=-3").json()["records"] == [{"id": -3, "v": "v-3"}]
    assert client.get("/tables/numbers/records?key=[4]").json()["count"] == 1
    assert client.get("/tables/numbers/records?min=0&max=3").json()["count"] == 3


@pytest.mark.parametrize("bad, words", [
    ({"key": "a", "ts": 1, "nope": 1}, ["record 1", "nope"]),
    ({"key": 7, "ts": 1}, ["record 1", "key"]),
    ({"ts": 1}, ["record 1", "key", "missing"]),
    ({"key": "a", "ts": "soon"}, ["record 1", "ts"]),
    ({"key": "a", "ts": 2**63}, ["record 1", "ts"]),
    ({"key": "a", "ts": 1, "blob": "***"}, ["record 1", "blob", "base64"]),
    ({"key": "a", "ts": 1, "tags": [1, 2]}, ["record 1", "tags"]),
])
def test_records_that_do_not_fit_are_422_and_nothing_is_written(client: TestClient, sleeper: Sleeper,
                                                                  bad: dict, words: list[str]) -> None:
    r = client.post("/tables/events/records", json={"records": [rec("ok"), bad]})
    assert r.status_code == 422, r.text
    for w in words:
        assert w in r.json()["detail"]
    assert records_in(sleeper, "events") == 0 and sleeper.table("events").buffer_stats().rows == 0


@pytest.mark.parametrize("body", [{}, {"records": []}, {"records": "x"}, {"records": [1]}, [rec("a")]])
def test_malformed_record_bodies_are_422(client: TestClient, body: object) -> None:
    assert client.post("/tables/events/records", json=body).status_code == 422


@pytest.mark.parametrize("query", ["", "?key=abc", "?key=%22a%22&key=%7B", "?key=1", "?min=%22z%22&max=%22a%22",
                                   "?min=1", "?limit=0&key=%22a%22"])
def test_bad_queries_are_4xx_with_a_message(client: TestClient, query: str) -> None:
    r = client.get(f"/tables/events/records{query}")
    assert r.status_code in (400, 422), r.text
    assert r.json()["detail"]


def test_request_validation_errors_are_one_message_naming_the_parameter(client: TestClient) -> None:
    r = client.get("/tables/events/records", params={"key": '"a"', "limit": 0})
    assert r.status_code == 422
    assert r.json()["detail"] == "query parameter limit: Input should be greater than or equal to 1"
    r = client.post("/tables/events/records", json={"records": [rec("a"), 7]})
    assert r.status_code == 422 and r.json()["detail"].startswith("body.records[1]: "), r.text


def test_inputs_that_once_gave_500_get_4xx_with_a_message(client: TestClient, sleeper: Sleeper, inbox: Path) -> None:
    for method, path, body in [("GET", "/tables/a%00b", None), ("GET", "/tables/%00/records?key=%22a%22", None),
                               ("GET", "/tables/%00/files", None), ("GET", "/tables/%00/ingest-requests", None),
                               ("POST", "/tables/%00/records", {"records": [rec("a")]}),
                               ("POST", "/tables/%00/ingest-requests", {"files": ["/x.parquet"]})]:
        r = client.request(method, path, json=body)
        assert r.status_code == 404 and "NUL" in r.json()["detail"], (method, path, r.text)
    deep = "[" * 3000 + "]" * 3000
    for params in ({"key": deep}, {"min": deep}, {"max": deep}):
        r = client.get("/tables/events/records", params=params)
        assert r.status_code == 400 and "nested too deeply" in r.json()["detail"], r.text
    r = client.post("/tables/events/records", content=b'{"records": [{"key": "\\ud800", "ts": 1}]}',
                    headers={"content-type": "application/json"})
    assert r.status_code == 422 and "not valid Unicode" in r.json()["detail"], r.text
    assert records_in(sleeper, "events") == 0
    r = client.post("/tables/events/ingest-requests", content=f'{{"files": ["{inbox}/\\ud800.csv"]}}'.encode(),
                    headers={"content-type": "application/json"})
    assert r.status_code == 422 and "valid Unicode" in r.json()["detail"], r.text


# ----- ingest requests --------------------------------------------------------------------
def write_input(d: Path, name: str, keys: list[str]) -> str:
    path = d / name
    pq.write_table(pa.table({"key": keys, "ts": pa.array([1] * len(keys), pa.int64()),
                             "blob": pa.array([k.encode() for k in keys], pa.binary()),
                             "tags": pa.array([[("n", 1)]] * len(keys), pa.map_(pa.string(), pa.int64())),
                             "items": pa.array([[k] for k in keys], pa.list_(pa.string()))}), path)
    return str(path)


def test_ingest_requests_are_queued_and_then_batched(client: TestClient, sleeper: Sleeper, inbox: Path) -> None:
    a = write_input(inbox, "a.parquet", ["a", "b"])
    b = write_input(inbox, "b.parquet", ["x"])
    r = client.post("/tables/events/ingest-requests", json={"files": [a, b]})
    assert r.status_code == 202, r.text
    reqs = r.json()["requests"]
    assert [(x["filename"], x["status"]) for x in reqs] == [(a, "pending"), (b, "pending")]
    listed = client.get("/tables/events/ingest-requests", params={"status": "pending"}).json()
    assert [x["request_id"] for x in listed] == [x["request_id"] for x in reqs]
    run_ingest_batcher(sleeper, "events")
    assert [x["status"] for x in client.get("/tables/events/ingest-requests").json()] == ["ingested", "ingested"]
    jobs = client.get("/tables/events/jobs", params={"kind": "ingest"}).json()
    assert [(j["status"], j["rows_written"]) for j in jobs] == [("committed", 3)]
    assert client.get("/tables/events/records", params={"min": '"a"'}).json()["count"] == 3


def test_ingest_request_naming_a_missing_file_queues_nothing(client: TestClient, inbox: Path) -> None:
    a = write_input(inbox, "a.parquet", ["a"])
    r = client.post("/tables/events/ingest-requests", json={"files": [a, str(inbox / "gone.parquet")]})
    assert r.status_code == 422 and "gone.parquet" in r.json()["detail"]
    assert client.get("/tables/events/ingest-requests").json() == []
    assert client.post("/tables/events/ingest-requests", json={"files": []}).status_code == 422
    assert client.get("/tables/events/ingest-requests?status=nonsense").status_code == 422


def queued(client: TestClient) -> list[str]:
    return [x["filename"] for x in client.get("/tables/events/ingest-requests").json()]


def test_ingest_requests_outside_the_allowed_prefixes_are_refused_naming_the_rule(
        client: TestClient, inbox: Path, tmp_path: Path) -> None:
    ok = write_input(inbox, "ok.parquet", ["a"])
    outside = write_input(tmp_path, "outside.parquet", ["b"])
    (inbox / "sub").mkdir()
    (inbox / "escape.parquet").symlink_to(outside)
    (inbox / "sub" / "inside.parquet").symlink_to(ok)
    lookalike = tmp_path / "inbox-other"
    lookalike.mkdir()
    beside = write_input(lookalike, "x.parquet", ["c"])
    for bad in [outside, f"{inbox}/../outside.parquet", f"{inbox}/sub/../../outside.parquet",
                str(inbox / "escape.parquet"), beside, f"file://{ok}", "ok.parquet", "inbox/ok.parquet",
                "s3://some-bucket/inbox/x.parquet", "http://example.com/x.parquet", f"{ok}\x00.csv", ""]:
        r = client.post("/tables/events/ingest-requests", json={"files": [ok, bad]})
        assert r.status_code == 422, (bad, r.text)
        detail = r.json()["detail"]
        assert "allowed ingest prefixes" in detail and "ingest.allowed_prefixes" in detail, detail
        assert "nothing queued" in detail
        # no path of the server's: neither the prefixes nor where a link leads
        assert str(inbox) not in detail.replace(repr(bad)[1:-1], ""), detail
    assert queued(client) == [], "a refused request queues nothing, not even its allowed files"
    r = client.post("/tables/events/ingest-requests", json={"files": [str(inbox / "sub" / "inside.parquet")]})
    assert r.status_code == 202, r.text
    assert queued(client) == [ok], "a link inside the prefix is queued as the file it leads to"


def test_default_ingest_prefixes_are_the_stores_ingest_folder_and_sleeper_home_ingest(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    (home / "sleeper.toml").write_text('[state_store]\nbackend = "memory"\n[object_store]\nuri = "data"\n')
    with Sleeper(home) as s, TestClient(create_app(lambda: s)) as c:
        s.create_table("events", SCHEMA)
        (home / "ingest").mkdir()
        (home / "data" / "ingest" / "in").mkdir(parents=True)
        files = [write_input(home / "ingest", "a.parquet", ["a"]),
                 write_input(home / "data" / "ingest" / "in", "b.parquet", ["b"])]
        assert c.post("/tables/events/ingest-requests", json={"files": files}).status_code == 202
        (home / "data" / "in").mkdir()
        for elsewhere in [write_input(tmp_path, "c.parquet", ["c"]), write_input(home / "data" / "in", "d.parquet",
                                                                                  ["d"])]:
            r = c.post("/tables/events/ingest-requests", json={"files": [elsewhere]})
            assert r.status_code == 422 and str(home / "ingest") not in r.json()["detail"]


def test_a_tables_data_files_are_never_ingested_through_rest(tmp_path: Path) -> None:
    """A writer of table A cannot queue table B's data files into A, even when the
    allowed prefixes cover the whole object store."""
    home = tmp_path / "home"
    home.mkdir()
    (home / "sleeper.toml").write_text('[state_store]\nbackend = "memory"\n[object_store]\nuri = "data"\n'
                                       '[ingest]\nallowed_prefixes = ["data"]\n')
    with Sleeper(home) as s, TestClient(create_app(lambda: s)) as c:
        a, b = s.create_table("a", SCHEMA), s.create_table("b", SCHEMA)
        (home / "ingest").mkdir()
        b_files = [f.filename for f in b.ingest([write_input(home / "ingest", "b.parquet", ["x"])]).files]
        r = c.post("/tables/a/ingest-requests", json={"files": [s.objects.uri_of(f) for f in b_files]})
        assert r.status_code == 422, r.text
        assert "never a table's own data files" in r.json()["detail"] and "own data in the object store" in r.json()[
            "detail"]
        assert a.sleeper.state_store.list_ingest_requests(a.info.table_id) == []


def test_configured_ingest_prefixes_replace_the_defaults(tmp_path: Path) -> None:
    home = tmp_path / "home"
    (home / "incoming").mkdir(parents=True)
    (home / "ingest").mkdir()
    (home / "sleeper.toml").write_text('[state_store]\nbackend = "memory"\n[object_store]\nuri = "data"\n'
                                       '[ingest]\nallowed_prefixes = ["incoming", "s3://bucket/in"]\n')
    with Sleeper(home) as s, TestClient(create_app(lambda: s)) as c:
        s.create_table("events", SCHEMA)
        ok = write_input(home / "incoming", "a.parquet", ["a"])
        assert c.post("/tables/events/ingest-requests", json={"files": [ok]}).status_code == 202
        for bad in [write_input(home / "ingest", "b.parquet", ["b"]), "s3://bucket/other/x.parquet",
                    "s3://bucket/in/../x.parquet", "s3://bucketx/in/x.parquet", "s3://bucket/inx/y.parquet"]:
            r = c.post("/tables/events/ingest-requests", json={"files": [bad]})
            assert r.status_code == 422 and "allowed ingest prefixes" in r.json()["detail"], (bad, r.text)


# ----- streamed reads ---------------------------------------------------------------------
def test_record_reads_are_streamed_with_the_documented_shape(client: TestClient) -> None:
    rows = [{"id": i, "v": f"v{i}"} for i in range(-500, 1500)]
    assert client.post("/tables/numbers/records", json={"records": rows}).status_code == 201
    with client.stream("GET", "/tables/numbers/records", params={"min": "-1000", "limit": 5000}) as r:
        assert r.status_code == 200 and r.headers["content-type"] == "application/json"
        # one batch: in hand before the response starts, so sent whole (no stream's thread hops)
        assert r.headers["content-length"] == str(len(r.read()))
        body = json.loads(r.read())
    assert body == {"records": rows, "count": 2000, "truncated": False}
    for limit in (1, 1999, 2000):
        got = client.get("/tables/numbers/records", params={"min": "-1000", "limit": limit}).json()
        assert got == {"records": rows[:limit], "count": limit, "truncated": limit < 2000}
    assert client.get("/tables/numbers/records", params={"key": "99999"}).json() == \
        {"records": [], "count": 0, "truncated": False}


def test_a_record_read_reads_only_up_to_its_limit(client: TestClient, sleeper: Sleeper,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    from sleeper_ops.query.runner import QueryRunner

    big = pa.table({"id": pa.array(range(200_000), pa.int64()), "v": pa.array(["x"] * 200_000)})
    sleeper.table("numbers").ingest(big)
    read: list[int] = []
    original = QueryRunner._read_batches

    def counting(self: QueryRunner, task: object, batch_rows: int) -> Iterator[pa.RecordBatch]:
        for b in original(self, task, batch_rows):  # type: ignore[arg-type]
            read.append(b.num_rows)
            yield b
    monkeypatch.setattr(QueryRunner, "_read_batches", counting)
    got = client.get("/tables/numbers/records", params={"min": "0", "limit": 10}).json()
    assert got["count"] == 10 and got["truncated"]
    assert sum(read) <= 2 * 32_768, f"read {sum(read)} of 200,000 records for 10"
    read.clear()
    with client.stream("GET", "/tables/numbers/records", params={"min": "0", "limit": 100_000}) as r:
        assert r.status_code == 200 and "content-length" not in r.headers, "more than a batch: streamed"
        body = json.loads(b"".join(r.iter_bytes()))
    assert body["count"] == 100_000 and body["truncated"]
    assert [r["id"] for r in body["records"][:3]] == [0, 1, 2] and body["records"][-1]["id"] == 99_999


# ----- the app itself ---------------------------------------------------------------------
def test_openapi_schema_documents_the_routes(client: TestClient) -> None:
    spec = client.get("/openapi.json").json()
    assert {"/tables", "/tables/{t}/ingest-requests", "/tables/{t}/records", "/tables/{t}/partitions",
            "/tables/{t}/files", "/tables/{t}/jobs"} <= set(spec["paths"])
    assert "RecordsOut" in spec["components"]["schemas"]


def test_auth_dependency_guards_every_route_but_not_the_schema(sleeper: Sleeper) -> None:
    def token(authorization: str = Header("")) -> None:
        if authorization != "Bearer good":
            raise HTTPException(401, "Not authenticated")

    with TestClient(create_app(lambda: sleeper, auth_dependency=token)) as c:
        assert c.get("/tables").status_code == 401
        assert c.post("/tables/events/records", json={"records": [rec("a")]}).status_code == 401
        assert records_in(sleeper, "events") == 0
        assert c.get("/tables", headers={"Authorization": "Bearer good"}).status_code == 200
        assert c.get("/openapi.json").status_code == 200


def test_lazy_sleeper_opens_once_and_is_closed_at_shutdown(sleeper: Sleeper) -> None:
    opened: list[int] = []

    class Probe:
        def tables(self):
            return sleeper.tables()

        def close(self) -> None:
            opened.append(-1)

    def factory():
        opened.append(1)
        return Probe()

    provider = LazySleeper(factory=factory)
    with TestClient(create_app(provider)) as c:  # type: ignore[arg-type]
        assert opened == [], "nothing is opened before the first request"
        assert c.get("/tables").status_code == 200
        assert c.get("/tables").status_code == 200
    assert opened == [1, -1]


# ----- the write buffer -------------------------------------------------------------------
def test_written_records_are_read_from_the_buffer_then_from_files_exactly_once(client: TestClient,
                                                                               sleeper: Sleeper) -> None:
    assert client.post("/tables/events/records", json={"records": [rec("m", 1), rec("c")]}).status_code == 201
    assert client.post("/tables/events/records", json={"records": [rec("m", 2)]}).status_code == 201
    assert records_in(sleeper, "events") == 0, "a write goes to the buffer, not to files"
    every = {"min": '"a"', "max": "null"}
    before = client.get("/tables/events/records", params=every).json()["records"]
    assert before == [rec("c"), rec("m", 1), rec("m", 2)]
    assert client.get("/tables/events/records", params={**every, "buffer": "false"}).json()["count"] == 0
    sleeper.table("events").flush()
    assert client.get("/tables/events/records", params=every).json()["records"] == before
    assert client.get("/tables/events/records", params={**every, "buffer": "false"}).json()["records"] == before
    assert records_in(sleeper, "events") == 3


def test_a_full_buffer_is_429_and_stores_nothing_until_flushed(client: TestClient, sleeper: Sleeper) -> None:
    sleeper.set_properties("events", {"sleeper.table.write.buffer.max.records": "2"})
    assert client.post("/tables/events/records", json={"records": [rec("a"), rec("b")]}).status_code == 201
    r = client.post("/tables/events/records", json={"records": [rec("c")]})
    assert r.status_code == 429 and "buffer full, flush pending" in r.json()["detail"]
    sleeper.table("events").flush()
    assert client.post("/tables/events/records", json={"records": [rec("c")]}).status_code == 201
    got = client.get("/tables/events/records", params={"min": '"a"', "max": "null"}).json()
    assert [x["key"] for x in got["records"]] == ["a", "b", "c"]


# ----- deletes (issue 22) ------------------------------------------------------------------
def test_a_delete_by_range_or_key_hides_the_records_and_a_repeated_key_adds_nothing(client: TestClient,
                                                                                    sleeper: Sleeper) -> None:
    client.post("/tables/events/records", json={"records": [rec("a"), rec("b"), rec("c", 3), rec("c", 4), rec("q")]})
    r = client.delete("/tables/events/records", params={"min": '"b"', "max": '"c"'},
                      headers={"Idempotency-Key": "erase-b"})
    assert r.status_code == 200 and r.json()["applied"] and r.json()["tombstone"] == 1, r.text
    again = client.delete("/tables/events/records", params={"min": '"b"', "max": '"c"'},
                          headers={"Idempotency-Key": "erase-b"})
    assert again.status_code == 200 and not again.json()["applied"]
    assert client.delete("/tables/events/records", params={"key": '"c"', "where": "ts = 3"}).status_code == 200
    got = client.get("/tables/events/records", params={"min": '""'}).json()
    assert [(x["key"], x["ts"]) for x in got["records"]] == [("a", 1), ("c", 4), ("q", 1)]
    assert sleeper.table("events").state().delete_count == 2


@pytest.mark.parametrize(("params", "fragment"), [
    ({"min": '"c"', "max": '"c"'}, "empty"),
    ({"min": '"d"', "max": '"c"'}, "empty"),
    ({"key": '"c"', "where": "colour = 1"}, "colour"),
    ({}, "give at least one key"),
])
def test_a_bad_delete_is_400_with_one_message_and_deletes_nothing(client: TestClient, sleeper: Sleeper,
                                                                   params: dict, fragment: str) -> None:
    r = client.delete("/tables/events/records", params=params)
    assert r.status_code == 400 and fragment in r.json()["detail"], r.text
    assert sleeper.table("events").state().delete_count == 0
