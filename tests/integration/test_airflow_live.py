"""Live: the table status page in a real Airflow API server, and a headless Chromium
screenshot of it.

An ``airflow api-server`` (SQLite metadata, simple auth manager with a known password,
the Sleeper plugin from its entry point) serves a Sleeper on PostgreSQL whose table has
been through ingest, splitting, compaction and the ingest batcher, so the page has a
partition tree, files and a job history to show. The page must refuse requests
without Airflow's auth and serve them with the UI's ``_token`` cookie.

The screenshot test drives Debian's ``chromium`` (or ``chromium-headless-shell``) over
the DevTools protocol; without it the test is skipped, saying which package to install.
It saves its screenshots in pytest's tmp dir, and the page as seen inside Airflow's UI as
``docs/status_page.png`` when that is missing (or when ``SLEEPER_UPDATE_SCREENSHOT=1``).
"""

from __future__ import annotations

import base64
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import textwrap
import time
import uuid
from pathlib import Path
from typing import Any, Iterator, Optional

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests.airflow_db import seed_home

httpx = pytest.importorskip("httpx")

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
PASSWORD = "status-page-secret"
SCHEMA = {"rowKeyFields": [{"name": "key", "type": "StringType"}],
          "sortKeyFields": [{"name": "ts", "type": "LongType"}],
          "valueFields": [{"name": "value", "type": "StringType"}]}
CHROMIUM_CANDIDATES = ("chromium", "chromium-headless-shell", "chromium-browser", "google-chrome")
#: A table from before names were limited to 94 characters: its DAGs cannot be built (issue 34 finding 1),
#: and its name is wide enough to push the index's columns off screen uncut (finding 8).
OLD_LONG_NAME = ("customer_clickstream_events_enriched_with_session_attribution_and_device_fingerprints_for_"
                 "the_2026_marketing_warehouse")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _rows(n: int, seed: int) -> pa.Table:
    keys = [f"key-{(i * 7919 + seed * 104729) % 100000:06d}" for i in range(n)]
    return pa.table({"key": keys, "ts": pa.array(range(n), pa.int64()), "value": [f"v{seed}-{i}" for i in range(n)]})


def _populate(sleeper_home: Path, work: Path) -> dict[str, Any]:
    """A table that has been through every operation, and an offline one."""
    from sleeper_ops import Sleeper
    from sleeper_ops.ingest.batcher import run_ingest_batcher, submit_ingest_requests

    with Sleeper(sleeper_home) as s:
        t = s.create_table("events", SCHEMA, split_points=["key-050000"], properties={
            "sleeper.table.partition.splitting.threshold": "2500", "sleeper.table.compaction.strategy": "basic",
            "sleeper.table.ingest.batcher.job.min.size": "1"})
        for seed in range(3):
            t.ingest(_rows(2000, seed))
        t.split()
        t.compact()
        t.compact()
        files = []
        for seed in range(3, 5):
            path = work / f"batch-{seed}.parquet"
            pq.write_table(_rows(1000, seed), path)
            files.append(str(path))
        submit_ingest_requests(s, "events", files)
        run_ingest_batcher(s, "events")
        s.create_table("archive", SCHEMA, properties={"sleeper.table.online": "false"})
        from statestore.partitions import partitions_from_split_points
        from statestore.schema import Schema

        schema = Schema.from_dict(SCHEMA)  # the state store takes any name, as an older release did
        s.state_store.create_table(OLD_LONG_NAME, schema, partitions_from_split_points(schema, ()))
        state = t.state()
        return {"partitions": sorted(state.partitions), "records": 8000,
                "job_kinds": sorted({j.kind for j in t.jobs()})}


@pytest.fixture(scope="module")
def server(pg_admin_dsn: str, pg_template: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    import psycopg
    from psycopg import sql
    from psycopg.conninfo import make_conninfo

    # Not under pytest's basetemp: concurrent pytest sessions rotate it.
    root = Path(tempfile.mkdtemp(prefix="sleeper-status-live-"))
    database = f"sleeper_live_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(pg_admin_dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE DATABASE {} TEMPLATE {}").format(sql.Identifier(database),
                                                                      sql.Identifier(pg_template)))
    proc: Optional[subprocess.Popen[bytes]] = None
    try:
        airflow_home, sleeper_home = root / "airflow", root / "sleeper"
        for d in (airflow_home, sleeper_home, airflow_home / "plugins"):
            d.mkdir(parents=True)
        (sleeper_home / "sleeper.toml").write_text(textwrap.dedent(f"""\
            [object_store]
            uri = "data"
            [state_store]
            backend = "postgres"
            dsn = "{make_conninfo(pg_admin_dsn, dbname=database)}"
            """))
        expected = _populate(sleeper_home, root)
        (airflow_home / "passwords.json").write_text(json.dumps({"admin": PASSWORD}))
        port = _free_port()
        env = {k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW", "_AIRFLOW", "SLEEPER_"))}
        env.update({
            "PATH": f"{BIN}{os.pathsep}{env.get('PATH', '')}",
            "AIRFLOW_HOME": str(airflow_home),
            "SLEEPER_HOME": str(sleeper_home),
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "AIRFLOW__CORE__DAGS_FOLDER": str(REPO / "dags"),
            "AIRFLOW__CORE__PLUGINS_FOLDER": str(airflow_home / "plugins"),
            "AIRFLOW__CORE__AUTH_MANAGER":
                "airflow.api_fastapi.auth.managers.simple.simple_auth_manager.SimpleAuthManager",
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": "admin:admin",
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE": str(airflow_home / "passwords.json"),
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{airflow_home / 'airflow.db'}",
            "AIRFLOW__API_AUTH__JWT_SECRET": "s" * 64,
            "AIRFLOW__API__BASE_URL": f"http://127.0.0.1:{port}",
        })
        log = open(root / "api-server.log", "wb")
        seed_home(airflow_home, tmp_path_factory)  # the run's migrated database (tests/airflow_db.py)
        proc = subprocess.Popen([str(BIN / "airflow"), "api-server", "--host", "127.0.0.1", "--port", str(port),
                                 "--workers", "1"], env=env, stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True)
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 180
        while True:
            assert proc.poll() is None, (root / "api-server.log").read_text()[-4000:]
            assert time.monotonic() < deadline, "the API server did not answer in 180 s"
            try:
                if httpx.get(f"{url}/api/v2/monitor/health", timeout=5).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            time.sleep(1)
        r = httpx.post(f"{url}/auth/token", json={"username": "admin", "password": PASSWORD}, timeout=30)
        assert r.status_code in (200, 201), r.text
        yield {"url": url, "token": r.json()["access_token"], "expected": expected}
    finally:
        if proc is not None:
            try:
                os.killpg(proc.pid, signal.SIGTERM)
                proc.wait(timeout=30)
            except (ProcessLookupError, subprocess.TimeoutExpired):
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        with psycopg.connect(pg_admin_dsn, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(database)))
        shutil.rmtree(root, ignore_errors=True)


def _get(server: dict[str, Any], path: str, *, cookie: bool = True) -> Any:
    cookies = {"_token": server["token"]} if cookie else {}
    with httpx.Client(base_url=server["url"], cookies=cookies, timeout=60) as c:
        return c.get(path)


# ----- the page over HTTP -------------------------------------------------------------------------
def test_status_pages_are_refused_without_airflow_auth(server: dict[str, Any]) -> None:
    for path in ("/sleeper/ui/", "/sleeper/ui/tables/events"):
        r = _get(server, path, cookie=False)
        assert r.status_code == 401, (path, r.text[:500])
        assert "Sign in to Airflow" in r.text
        assert "key-0" not in r.text  # nothing of the table leaks
    with httpx.Client(base_url=server["url"], cookies={"_token": "not-a-jwt"}, timeout=60) as c:
        assert c.get("/sleeper/ui/").status_code == 401


def test_index_lists_the_tables_with_the_ui_cookie(server: dict[str, Any]) -> None:
    r = _get(server, "/sleeper/ui/")
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/html")
    assert "href='tables/events'" in r.text and "href='tables/archive'" in r.text
    assert "offline" in r.text and f"{server['expected']['records']:,}" in r.text


def test_a_bearer_token_works_too(server: dict[str, Any]) -> None:
    with httpx.Client(base_url=server["url"], headers={"Authorization": f"Bearer {server['token']}"},
                      timeout=60) as c:
        assert c.get("/sleeper/ui/tables/events").status_code == 200


def test_table_page_shows_the_tree_the_files_and_the_job_history(server: dict[str, Any]) -> None:
    r = _get(server, "/sleeper/ui/tables/events")
    assert r.status_code == 200
    page = r.text
    for pid in server["expected"]["partitions"]:
        assert pid in page, f"partition {pid} missing from the tree"
    assert server["expected"]["job_kinds"] == ["compaction", "ingest", "split"]
    assert "aria-label='jobs over time'" in page and "aria-label='records per leaf partition'" in page
    assert "aria-label='job rates'" in page
    for kind in ("compaction", "ingest", "split"):
        assert re.search(rf"<td>{kind}</td><td>committed</td>", page), f"no committed {kind} job listed"
    assert "split threshold" in page
    assert "<script" not in page and "http://" not in page.replace("http://www.w3.org/2000/svg", "")  # self-contained


def test_unknown_table_page_is_404(server: dict[str, Any]) -> None:
    assert _get(server, "/sleeper/ui/tables/nope").status_code == 404


def test_the_page_is_linked_from_the_airflow_ui(server: dict[str, Any]) -> None:
    with httpx.Client(base_url=server["url"], headers={"Authorization": f"Bearer {server['token']}"},
                      timeout=60) as c:
        plugins = c.get("/api/v2/plugins").json()["plugins"]
    views = [v for p in plugins if p["name"] == "sleeper" for v in p["external_views"]]
    assert [(v["name"], v["href"], v["destination"]) for v in views] == [("Sleeper tables", "sleeper/ui/", "nav")]


# ----- a real browser -----------------------------------------------------------------------------
def _chromium() -> Optional[str]:
    for name in CHROMIUM_CANDIDATES:
        found = shutil.which(name)
        if found:
            return found
    return None


class DevTools:
    """The least of the Chrome DevTools protocol needed to screenshot a page with a cookie."""

    def __init__(self, binary: str, profile: Path) -> None:
        self.proc = subprocess.Popen(
            [binary, "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
             "--hide-scrollbars", "--no-first-run", "--remote-debugging-address=127.0.0.1",
             "--remote-debugging-port=0", f"--user-data-dir={profile}", "about:blank"],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, start_new_session=True)
        endpoint = None
        deadline = time.monotonic() + 60
        assert self.proc.stderr is not None
        while endpoint is None and time.monotonic() < deadline:
            line = self.proc.stderr.readline()
            if not line and self.proc.poll() is not None:
                raise AssertionError(f"chromium exited with {self.proc.returncode}")
            m = re.search(r"DevTools listening on (ws://\S+)", line)
            if m:
                endpoint = m.group(1)
        assert endpoint is not None, "chromium did not open its DevTools port"
        http_base = "http://" + endpoint.split("/")[2]
        pages = [t for t in httpx.get(f"{http_base}/json/list", timeout=10).json() if t["type"] == "page"]
        from websockets.sync.client import connect

        self.ws = connect(pages[0]["webSocketDebuggerUrl"], max_size=None)
        self.next_id = 0

    def call(self, method: str, **params: Any) -> dict[str, Any]:
        self.next_id += 1
        self.ws.send(json.dumps({"id": self.next_id, "method": method, "params": params}))
        while True:
            msg = json.loads(self.ws.recv(timeout=60))
            if msg.get("id") == self.next_id:
                assert "error" not in msg, msg
                return msg.get("result", {})

    def wait_for_event(self, method: str, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            msg = json.loads(self.ws.recv(timeout=max(0.1, deadline - time.monotonic())))
            if msg.get("method") == method:
                return
        raise AssertionError(f"no {method} in {timeout} s")

    def dom_text(self) -> str:
        """Every text node of the page, iframes included (the DOM as Chromium holds it)."""
        texts: list[str] = []

        def walk(node: dict[str, Any]) -> None:
            if node.get("nodeType") == 3:
                texts.append(node.get("nodeValue", ""))
            for child in (*node.get("children", ()), *([node["contentDocument"]] if "contentDocument" in node else ())):
                walk(child)
        walk(self.call("DOM.getDocument", depth=-1, pierce=True)["root"])
        return "\n".join(texts)

    def screenshot(self, url: str, cookie: dict[str, str], shows: tuple[str, ...], width: int = 1280,
                   height: int = 1100) -> tuple[bytes, str]:
        """A PNG of ``url`` once its DOM (iframes included) holds every text in ``shows``,
        and that DOM's text."""
        self.call("Network.enable")
        self.call("Network.setCookie", name=cookie["name"], value=cookie["value"], url=cookie["url"])
        self.call("Emulation.setDeviceMetricsOverride", width=width, height=height, deviceScaleFactor=1,
                  mobile=False)
        self.call("Page.enable")
        self.call("Page.navigate", url=url)
        self.wait_for_event("Page.loadEventFired")
        deadline = time.monotonic() + 60  # the Airflow UI renders, then loads its iframe
        text = self.dom_text()
        while not all(s in text for s in shows):
            assert time.monotonic() < deadline, f"{url} never showed {shows}; its text:\n{text[:2000]}"
            time.sleep(0.2)
            text = self.dom_text()
        data = self.call("Page.captureScreenshot", format="png")["data"]
        return base64.b64decode(data), text

    def page_width(self) -> tuple[int, int]:
        """The current page's scroll width and its viewport's width (CSS pixels)."""
        r = self.call("Runtime.evaluate", expression="[document.documentElement.scrollWidth, window.innerWidth]",
                      returnByValue=True)
        width, viewport = r["result"]["value"]
        return int(width), int(viewport)

    def close(self) -> None:
        try:
            self.ws.close()
        finally:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def _browser(server: dict[str, Any], tmp_path: Path) -> tuple[DevTools, dict[str, str]]:
    """A headless Chromium (the test skips, saying how to install one, when there is
    none) and the cookie that signs it in to the server."""
    binary = _chromium()
    if binary is None:
        pytest.skip("no headless Chromium on this machine: install Debian's package 'chromium' "
                    "(or 'chromium-headless-shell') to run this test")
    cookie = {"name": "_token", "value": server["token"], "url": server["url"]}
    return DevTools(binary, tmp_path / "chromium-profile"), cookie


def test_chromium_screenshots_the_status_page(server: dict[str, Any], tmp_path: Path) -> None:
    browser, cookie = _browser(server, tmp_path)
    # the table's name and its first leaf partition: the rendered table page, not a login or error page
    shows = ("events", server["expected"]["partitions"][0], "split threshold")
    try:
        page, text = browser.screenshot(f"{server['url']}/sleeper/ui/tables/events", cookie, shows)
        assert "Sign in to Airflow" not in text
        # The page inside Airflow's UI (the nav entry's iframe, deep-linked to the table).
        in_ui, _ = browser.screenshot(f"{server['url']}/plugin/sleeper-tables/sleeper/ui/tables/events", cookie,
                                      shows)
    finally:
        browser.close()
    for name, png in (("status_page.png", page), ("status_page_in_airflow.png", in_ui)):
        assert png.startswith(b"\x89PNG\r\n\x1a\n") and len(png) > 20_000, f"{name}: {len(png)} bytes"
        (tmp_path / name).write_bytes(png)
    docs = REPO / "docs" / "status_page.png"
    if not docs.exists() or os.environ.get("SLEEPER_UPDATE_SCREENSHOT") == "1":
        docs.write_bytes(in_ui)


def test_walk_findings_1_and_8_chromium_screenshots_a_table_whose_dags_cannot_be_built(
        server: dict[str, Any], tmp_path: Path) -> None:
    """The index marks the table whose DAGs cannot be built red, with the reason, and its
    long name does not push the columns off screen (the page is no wider than the window);
    so does its own page. The screenshots' paths are printed (pytest -s)."""
    browser, cookie = _browser(server, tmp_path)
    shots = {}
    try:
        for name, path in (("status_index_unbuildable.png", "/sleeper/ui/"),
                           ("status_table_unbuildable.png", f"/sleeper/ui/tables/{OLD_LONG_NAME}")):
            png, text = browser.screenshot(f"{server['url']}{path}", cookie, ("DAGs cannot be built", "events"
                                           if path == "/sleeper/ui/" else "sleeper table rename"), height=700)
            assert f"table '{OLD_LONG_NAME}' has a name outside the rule" in text
            width, viewport = browser.page_width()
            assert width <= viewport, f"{path}: the page is {width} px wide in a {viewport} px window"
            shots[name] = png
    finally:
        browser.close()
    for name, png in shots.items():
        (tmp_path / name).write_bytes(png)
        print(f"screenshot: {tmp_path / name}")
