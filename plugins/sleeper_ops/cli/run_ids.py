"""How a CLI process names itself in job records and leases (``cli/<operation>/<host>/<pid>``),
and how a later one tells that such a process is gone (so its lease need not be waited for)."""

from __future__ import annotations

import os
import socket


def run_id_of(operation: str) -> str:
    """Names this CLI process in job records: ``cli/<operation>/<host>/<pid>``."""
    return f"cli/{operation}/{socket.gethostname()}/{os.getpid()}"


def process_gone(holder: str) -> bool:
    """Whether ``holder`` names a CLI process of this host (:func:`run_id_of`) that no longer
    exists (killed, or interrupted before it released its lease): its lease is taken
    over instead of waited for. A process of another host, or an Airflow run, is never
    judged gone."""
    parts = holder.split("/")
    if len(parts) != 4 or parts[0] != "cli" or parts[2] != socket.gethostname() or not parts[3].isdigit():
        return False
    pid = int(parts[3])
    if pid == os.getpid():
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except OSError:
        return False  # it exists (another user's)
    return False
