"""Paged REST listings (``GET /tables/{t}/partitions`` and ``/files``): at most ``limit``
entries per response and a ``next`` token for the page after (None: that was the last).

A token is opaque to clients: the base64url of a small JSON object naming the listing
and the last entry returned (a partition id, a file name), so a page is read from the
state store from there on (:meth:`~statestore.store.StateStore.file_page` reads only
the page where the backend allows). A token of another listing, or not one this API
gave, is refused (400) naming the rule.
"""

from __future__ import annotations

import base64
import binascii
import json
from typing import Optional

from sleeper_ops.errors import QueryError

DEFAULT_PAGE = 1000
MAX_PAGE = 10_000


def next_token(listing: str, after: str) -> str:
    """The token of the page after the entry ``after`` of ``listing``."""
    raw = json.dumps({"listing": listing, "after": after}, separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).decode("ascii").rstrip("=")


def after_of(listing: str, token: Optional[str]) -> Optional[str]:
    """The entry a ``next`` token of ``listing`` continues after (None: from the start)."""
    if token is None:
        return None
    try:
        raw = json.loads(base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)))
        after = raw["after"] if isinstance(raw, dict) and raw.get("listing") == listing else None
    except (ValueError, KeyError, TypeError, binascii.Error, UnicodeDecodeError):
        after = None
    if not isinstance(after, str):
        raise QueryError(f"query parameter next: not a token of the {listing} listing; pass the 'next' of the "
                         "previous page unchanged, or leave it out for the first page")
    return after
