"""The REST API's OpenAPI schema is pinned by a golden file: its routes, parameters,
status codes and bodies change only on purpose (rewrite the file with
``SLEEPER_UPDATE_GOLDEN=1``), never as a side effect of moving code."""

from __future__ import annotations

import json
import os
from pathlib import Path

from sleeper_ops.web.rest import create_app

GOLDEN = Path(__file__).parent / "golden" / "rest_openapi.json"


def _allow_all() -> None:
    """An auth dependency that refuses nothing (it adds 401 and 403 to the schema)."""


def _schemas() -> dict[str, object]:
    return {"plain": create_app(lambda: None).openapi(),
            "with_auth": create_app(lambda: None, auth_dependency=_allow_all).openapi()}


def test_the_openapi_schema_is_the_golden_one() -> None:
    schemas = json.loads(json.dumps(_schemas()))  # as JSON sees it (tuples are lists)
    if os.environ.get("SLEEPER_UPDATE_GOLDEN"):
        GOLDEN.write_text(json.dumps(schemas, indent=1) + "\n")
    assert schemas == json.loads(GOLDEN.read_text())
