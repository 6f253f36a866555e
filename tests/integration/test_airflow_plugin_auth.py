"""The Airflow plugin mounts the REST API in Airflow's API server behind Airflow's auth.

The API server app is built in a child process (Airflow's configuration is global to a
process, read from ``AIRFLOW_HOME`` at import): ``airflow.api_fastapi.app.create_app``
over a fresh ``AIRFLOW_HOME`` with SQLite, the simple auth manager with two real users
(``viewer`` with the Viewer role, ``admin`` with Admin), tokens from the API server's
``POST /auth/token``, and an empty plugins folder, so the plugin can only come from the
``airflow.plugins`` entry point. The child (this file run as a script) makes the
requests with FastAPI's TestClient and prints what it got as JSON; the test checks it.

A viewer reads every route of a table and writes none (403); an admin does both. The
auth manager is asked about the table's own DAGs; a table whose DAGs the user may not
read is left out of ``GET /tables`` and of the status page's index, and refused.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any

import pytest

PREFIX = "/sleeper/api/v1"
PASSWORDS = {"admin": "admin-secret", "viewer": "viewer-secret"}
RECORD = {"key": "k1", "v": "hello"}
TABLE_DAGS = {"sleeper_t_split", "sleeper_t_compaction", "sleeper_t_gc", "sleeper_t_ingest_batcher", "sleeper_t_flush"}


@pytest.fixture(scope="module")
def responses(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    root = tmp_path_factory.mktemp("airflow-auth")
    airflow_home, sleeper_home, plugins = root / "airflow", root / "sleeper", root / "no-plugins"
    for d in (airflow_home, sleeper_home, plugins):
        d.mkdir()
    (sleeper_home / "sleeper.toml").write_text('[state_store]\nbackend = "memory"\n'
                                               f'[object_store]\nuri = "{root / "data"}"\n')
    (airflow_home / "passwords.json").write_text(json.dumps(PASSWORDS))
    from tests.airflow_db import seed_home  # here: the child runs this file as a script

    seed_home(airflow_home, tmp_path_factory)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW", "SLEEPER"))}
    env.update({
        "AIRFLOW_HOME": str(airflow_home),
        "SLEEPER_HOME": str(sleeper_home),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__CORE__PLUGINS_FOLDER": str(plugins),
        "AIRFLOW__CORE__AUTH_MANAGER":
            "airflow.api_fastapi.auth.managers.simple.simple_auth_manager.SimpleAuthManager",
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": "viewer:viewer,admin:admin",
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE": str(airflow_home / "passwords.json"),
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{airflow_home / 'airflow.db'}",
        "AIRFLOW__API_AUTH__JWT_SECRET": "x" * 64,
    })
    proc = subprocess.run([sys.executable, __file__], env=env, capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, f"the API server child failed:\n{proc.stderr[-4000:]}"
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_plugin_is_loaded_from_its_entry_point(responses: dict[str, Any]) -> None:
    assert "sleeper" in responses["plugins"]


def test_requests_without_a_valid_token_get_401(responses: dict[str, Any]) -> None:
    for name in ("no_token", "junk_token", "wrong_scheme", "post_no_token", "ui_no_token"):
        status, body = responses[name]
        assert status == 401, (name, body)
        assert body["detail"]
    assert responses["tables_after_refused_post"] == ["t"] and responses["records_after_refused_post"] == 0, \
        "a refused write wrote nothing"


def test_an_admin_may_read_and_write(responses: dict[str, Any]) -> None:
    status, body = responses["admin_tables"]
    assert status == 200 and [t["name"] for t in body] == ["t"]
    assert responses["admin_post_records"][0] == 201
    status, body = responses["admin_get_records"]
    assert status == 200 and body["records"] == [RECORD]
    status, body = responses["admin_ingest_request"]
    assert status == 202 and body["requests"][0]["status"] == "pending", body
    assert responses["ui_cookie"][0] == 200, "the UI's session cookie is accepted too"


def test_a_viewer_may_read_every_route_of_a_table(responses: dict[str, Any]) -> None:
    for name in ("viewer_tables", "viewer_table", "viewer_get_records", "viewer_partitions", "viewer_files",
                 "viewer_jobs", "viewer_ingest_requests", "viewer_status_index", "viewer_status_table"):
        assert responses[name][0] == 200, (name, responses[name])
    assert [t["name"] for t in responses["viewer_tables"][1]] == ["t"]
    assert responses["viewer_get_records"][1]["records"] == [RECORD]


def test_a_viewer_may_not_write(responses: dict[str, Any]) -> None:
    for name in ("viewer_post_records", "viewer_ingest_request"):
        status, body = responses[name]
        assert status == 403, (name, body)
        assert "not allowed to write table 't'" in body["detail"] and "run" in body["detail"], body
        assert "sleeper_t_compaction" in body["detail"]
    assert responses["records_after_viewer_post"] == 1, "only the admin's record"
    assert responses["requests_after_viewer_post"] == 1, "only the admin's request"


def test_reads_and_writes_are_checked_against_the_tables_dags(responses: dict[str, Any]) -> None:
    reads = responses["checks_read"]
    assert {d for m, e, d in reads} == TABLE_DAGS and {(m, e) for m, e, _ in reads} == {("GET", None)}
    writes = responses["checks_write"]
    assert {d for m, e, d in writes} == TABLE_DAGS and {(m, e) for m, e, _ in writes} == {("POST", "RUN")}


def test_tables_the_user_may_not_read_are_hidden_and_refused(responses: dict[str, Any]) -> None:
    status, body = responses["filtered_tables"]
    assert status == 200 and [t["name"] for t in body] == ["t"], "the table 'secret' is not listed"
    status, body = responses["secret_table"]
    assert status == 403 and "not allowed to read table 'secret'" in body["detail"]
    status, body = responses["no_dag_access"]
    assert status == 403 and "read access to Airflow DAGs" in body["detail"]
    status, lists_t, lists_secret = responses["filtered_metrics"]
    assert status == 200 and lists_t and not lists_secret, "GET /metrics covers only the tables the user may read"
    status, lists_t, lists_secret = responses["filtered_status_index"]
    assert status == 200 and lists_t and not lists_secret, "the status page hides 'secret' as GET /tables does"


def test_ingest_requests_outside_the_allowed_prefixes_get_422(responses: dict[str, Any]) -> None:
    status, body = responses["admin_ingest_outside"]
    assert status == 422 and "ingest.allowed_prefixes" in body["detail"]


def test_openapi_schema_is_served(responses: dict[str, Any]) -> None:
    status, paths = responses["openapi"]
    assert status == 200 and "/tables/{t}/records" in paths


# ----- the child: run as a script ---------------------------------------------------------
def _child() -> None:  # pragma: no cover - runs in a subprocess
    import warnings
    from pathlib import Path

    import pyarrow as pa
    import pyarrow.parquet as pq

    # the token check looks up revoked tokens in Airflow's database: the parent copied a
    # migrated one into AIRFLOW_HOME (tests/airflow_db.py)
    from airflow import plugins_manager
    from airflow.api_fastapi.app import create_app, get_auth_manager

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from fastapi.testclient import TestClient

    from sleeper_ops.orchestration.plugin import sleeper

    schema = {"rowKeyFields": [{"name": "key", "type": "StringType"}],
              "valueFields": [{"name": "v", "type": "StringType"}]}
    sleeper().create_table("t", schema)
    inbox = Path(os.environ["SLEEPER_HOME"]) / "ingest"
    inbox.mkdir()
    pq.write_table(pa.table({"key": ["i"], "v": ["x"]}), inbox / "in.parquet")
    pq.write_table(pa.table({"key": ["o"], "v": ["y"]}), inbox.parent / "outside.parquet")
    out: dict[str, Any] = {"plugins": [p.name for p in plugins_manager._get_plugins()[0]]}

    def call(name: str, method: str, path: str, prefix: str = PREFIX, **kw: Any) -> Any:
        r = c.request(method, prefix + path, **kw)
        try:
            body = r.json()
        except ValueError:
            body = {"detail": r.text[:200]} if r.status_code >= 400 else r.text[:200]
        out[name] = [r.status_code, body]
        return r

    def records() -> int:
        """Records stored: in files, or written to the buffer."""
        t = sleeper().table("t")
        return sum(ref.record_count for ref in t.state().references.values()) + t.buffer_stats().rows

    def requests() -> int:
        return len(sleeper().state_store.list_ingest_requests(sleeper().table("t").info.table_id))

    with TestClient(create_app(apps="core")) as c:
        call("no_token", "GET", "/tables")
        call("junk_token", "GET", "/tables", headers={"Authorization": "Bearer not-a-jwt"})
        call("wrong_scheme", "GET", "/tables", headers={"Authorization": "Basic YWRtaW46YWRtaW4="})
        call("post_no_token", "POST", "/tables/t/records", json={"records": [RECORD]})
        call("ui_no_token", "GET", "/tables/t", prefix="/sleeper/ui")
        out["tables_after_refused_post"] = [t.name for t in sleeper().tables()]
        out["records_after_refused_post"] = records()

        def login(user: str) -> dict[str, str]:
            r = c.post("/auth/token", json={"username": user, "password": PASSWORDS[user]})
            assert r.status_code in (200, 201), r.text
            return {"Authorization": f"Bearer {r.json()['access_token']}"}

        admin, viewer = login("admin"), login("viewer")
        call("admin_tables", "GET", "/tables", headers=admin)
        call("admin_post_records", "POST", "/tables/t/records", json={"records": [RECORD]}, headers=admin)
        call("admin_get_records", "GET", "/tables/t/records", params={"key": '"k1"'}, headers=admin)
        call("admin_ingest_request", "POST", "/tables/t/ingest-requests", json={"files": [str(inbox / "in.parquet")]},
             headers=admin)
        call("admin_ingest_outside", "POST", "/tables/t/ingest-requests",
             json={"files": [str(inbox.parent / "outside.parquet")]}, headers=admin)
        c.cookies.set("_token", admin["Authorization"].split()[1])
        call("ui_cookie", "GET", "/tables")
        c.cookies.clear()

        call("viewer_tables", "GET", "/tables", headers=viewer)
        call("viewer_table", "GET", "/tables/t", headers=viewer)
        call("viewer_get_records", "GET", "/tables/t/records", params={"key": '"k1"'}, headers=viewer)
        for route in ("partitions", "files", "jobs", "ingest-requests"):
            call(f"viewer_{route.replace('-', '_')}", "GET", f"/tables/t/{route}", headers=viewer)
        call("viewer_status_index", "GET", "/", prefix="/sleeper/ui", headers=viewer)
        call("viewer_status_table", "GET", "/tables/t", prefix="/sleeper/ui", headers=viewer)
        call("viewer_post_records", "POST", "/tables/t/records", json={"records": [{"key": "k2", "v": "no"}]},
             headers=viewer)
        call("viewer_ingest_request", "POST", "/tables/t/ingest-requests",
             json={"files": [str(inbox / "in.parquet")]}, headers=viewer)
        out["records_after_viewer_post"] = records()
        out["requests_after_viewer_post"] = requests()

        am = get_auth_manager()
        real_dag_check = am.is_authorized_dag
        seen: list[tuple[str, Any, Any]] = []

        def recording(**kw: Any) -> bool:
            details, entity = kw.get("details"), kw.get("access_entity")
            seen.append((kw["method"], entity.value if entity is not None else None,
                         details.id if details is not None else None))
            return real_dag_check(**kw)

        am.is_authorized_dag = recording  # type: ignore[method-assign]
        c.get(PREFIX + "/tables/t/files", headers=viewer)
        out["checks_read"], seen[:] = list(seen), []
        c.post(PREFIX + "/tables/t/records", json={"records": [{"key": "k3", "v": "x"}]}, headers=admin)
        out["checks_write"] = list(seen)

        sleeper().create_table("secret", schema)

        def hide_secret(**kw: Any) -> bool:
            details = kw.get("details")
            if details is not None and details.id is not None and details.id.startswith("sleeper_secret_"):
                return False
            return real_dag_check(**kw)

        am.is_authorized_dag = hide_secret  # type: ignore[method-assign]
        call("filtered_tables", "GET", "/tables", headers=viewer)
        m = c.get(PREFIX + "/metrics", headers=viewer)
        out["filtered_metrics"] = [m.status_code, 'table="t"' in m.text, 'table="secret"' in m.text]
        page = c.get("/sleeper/ui/", headers=viewer)
        out["filtered_status_index"] = [page.status_code, "tables/t'" in page.text, "secret" in page.text]
        call("secret_table", "GET", "/tables/secret", headers=viewer)
        am.is_authorized_dag = lambda **kw: False  # type: ignore[method-assign]
        call("no_dag_access", "GET", "/tables", headers=viewer)
        am.is_authorized_dag = real_dag_check  # type: ignore[method-assign]

        r = c.get(PREFIX + "/openapi.json")
        out["openapi"] = [r.status_code, sorted(r.json()["paths"])]
    sleeper.close()
    print(json.dumps(out))


if __name__ == "__main__":
    _child()
