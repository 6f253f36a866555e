"""The Airflow plugin mounts the REST API in Airflow's API server behind Airflow's auth.

The API server app is built in a child process (Airflow's configuration is global to a
process, read from ``AIRFLOW_HOME`` at import): ``airflow.api_fastapi.app.create_app``
over a fresh ``AIRFLOW_HOME`` with SQLite, the simple auth manager and an empty plugins
folder, so the plugin can only come from the ``airflow.plugins`` entry point. The child
(this file run as a script) makes the requests with FastAPI's TestClient and prints
what it got as JSON; the test checks it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any

import pytest

PREFIX = "/sleeper/api/v1"
ADMIN_PASSWORD = "admin-secret"
RECORD = {"key": "k1", "v": "hello"}


@pytest.fixture(scope="module")
def responses(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    root = tmp_path_factory.mktemp("airflow-auth")
    airflow_home, sleeper_home, plugins = root / "airflow", root / "sleeper", root / "no-plugins"
    for d in (airflow_home, sleeper_home, plugins):
        d.mkdir()
    (sleeper_home / "sleeper.toml").write_text('[state_store]\nbackend = "memory"\n'
                                               f'[object_store]\nuri = "{root / "data"}"\n')
    (airflow_home / "passwords.json").write_text(json.dumps({"admin": ADMIN_PASSWORD}))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW", "SLEEPER"))}
    env.update({
        "AIRFLOW_HOME": str(airflow_home),
        "SLEEPER_HOME": str(sleeper_home),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__CORE__PLUGINS_FOLDER": str(plugins),
        "AIRFLOW__CORE__AUTH_MANAGER":
            "airflow.api_fastapi.auth.managers.simple.simple_auth_manager.SimpleAuthManager",
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": "admin:admin",
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
    for name in ("no_token", "junk_token", "wrong_scheme", "post_no_token"):
        status, body = responses[name]
        assert status == 401, (name, body)
        assert body["detail"]
    assert responses["tables_after_refused_post"] == ["t"] and responses["records_after_refused_post"] == 0, \
        "a refused write wrote nothing"


def test_requests_with_an_airflow_token_are_served(responses: dict[str, Any]) -> None:
    status, body = responses["tables"]
    assert status == 200 and [t["name"] for t in body] == ["t"]
    assert responses["post_records"][0] == 201
    status, body = responses["get_records"]
    assert status == 200 and body["records"] == [RECORD]
    assert responses["ui_cookie"][0] == 200, "the UI's session cookie is accepted too"


def test_a_user_the_auth_manager_does_not_allow_gets_403(responses: dict[str, Any]) -> None:
    status, body = responses["forbidden"]
    assert status == 403 and "Sleeper" in body["detail"]


def test_openapi_schema_is_served(responses: dict[str, Any]) -> None:
    status, paths = responses["openapi"]
    assert status == 200 and "/tables/{t}/records" in paths


# ----- the child: run as a script ---------------------------------------------------------
def _child() -> None:  # pragma: no cover - runs in a subprocess
    import warnings

    from airflow.utils import db

    db.initdb()  # the token check looks up revoked tokens in Airflow's database

    from airflow import plugins_manager
    from airflow.api_fastapi.app import create_app, get_auth_manager

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from fastapi.testclient import TestClient

    from sleeper_ops.airflow.plugin import sleeper

    sleeper().create_table("t", {"rowKeyFields": [{"name": "key", "type": "StringType"}],
                                 "valueFields": [{"name": "v", "type": "StringType"}]})
    out: dict[str, Any] = {"plugins": [p.name for p in plugins_manager._get_plugins()[0]]}

    def call(name: str, method: str, path: str, **kw: Any) -> Any:
        r = c.request(method, PREFIX + path, **kw)
        out[name] = [r.status_code, r.json()]
        return r

    def records() -> int:
        t = sleeper().table("t")
        return sum(ref.record_count for ref in t.state().references.values())

    with TestClient(create_app(apps="core")) as c:
        call("no_token", "GET", "/tables")
        call("junk_token", "GET", "/tables", headers={"Authorization": "Bearer not-a-jwt"})
        call("wrong_scheme", "GET", "/tables", headers={"Authorization": "Basic YWRtaW46YWRtaW4="})
        call("post_no_token", "POST", "/tables/t/records", json={"records": [RECORD]})
        out["tables_after_refused_post"] = [t.name for t in sleeper().tables()]
        out["records_after_refused_post"] = records()

        token = c.post("/auth/token", json={"username": "admin", "password": ADMIN_PASSWORD}).json()["access_token"]
        auth = {"Authorization": f"Bearer {token}"}
        call("tables", "GET", "/tables", headers=auth)
        call("post_records", "POST", "/tables/t/records", json={"records": [RECORD]}, headers=auth)
        call("get_records", "GET", "/tables/t/records", params={"key": '"k1"'}, headers=auth)
        c.cookies.set("_token", token)
        call("ui_cookie", "GET", "/tables")
        c.cookies.clear()

        am = get_auth_manager()
        am.is_authorized_custom_view = lambda **kw: False  # type: ignore[method-assign]
        call("forbidden", "GET", "/tables", headers=auth)

        r = c.get(PREFIX + "/openapi.json")
        out["openapi"] = [r.status_code, sorted(r.json()["paths"])]
    sleeper.close()
    print(json.dumps(out))


if __name__ == "__main__":
    _child()
