"""The "Sleeper table" extra link of every Sleeper task: the table's status page
(``/sleeper/ui/tables/<table>``, :mod:`sleeper_ops.web.status_page`) on the Airflow
API server that serves the UI (``[api] base_url``)."""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

from airflow.sdk import BaseOperatorLink

#: where the status page is mounted (sleeper_ops.web.status_page.URL_PREFIX)
STATUS_PREFIX = "/sleeper/ui"


def table_page_url(table: str, base_url: str = "") -> str:
    return f"{base_url.rstrip('/')}{STATUS_PREFIX}/tables/{quote(table, safe='')}"


class SleeperTableLink(BaseOperatorLink):
    """Links a task to the status page of its table."""

    name = "Sleeper table"

    def get_link(self, operator: Any, *, ti_key: Any) -> str:
        from airflow.configuration import conf

        table = getattr(operator, "table", None)
        if not isinstance(table, str) or not table or "{{" in table:
            return ""
        return table_page_url(table, conf.get("api", "base_url", fallback="") or "")
