"""SimpleAuthManager's users for ``sleeper airflow`` (``--users``) and ``sleeper cluster``:
the ``NAME:ROLE`` list checked before Airflow starts, and the passwords Airflow generates
for them, read back to be printed."""

from __future__ import annotations

import json
from pathlib import Path

from sleeper_ops.errors import ConfigError

PASSWORDS_FILE = "simple_auth_manager_passwords.json.generated"
#: SimpleAuthManager's roles, least to most.
ROLES = ("viewer", "user", "op", "admin")
USERS_VARIABLE = "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS"


def parse_users(spec: str) -> str:
    """``admin:Admin,viewer:Viewer`` checked and normalised (``admin:admin,viewer:viewer``)
    for SimpleAuthManager: each ``name:role`` with a role of :data:`ROLES`, names unique,
    and ``admin:admin`` among them (start-up signs in as ``admin`` to know Airflow is
    ready). Raises ConfigError naming the rule."""
    users: dict[str, str] = {}
    for part in spec.split(","):
        name, sep, role = part.strip().partition(":")
        if not sep or not name or role.lower() not in ROLES or ":" in role:
            raise ConfigError(f"--users: {part.strip()!r} is not NAME:ROLE with ROLE one of {', '.join(ROLES)}")
        if name in users:
            raise ConfigError(f"--users: user {name!r} is named twice")
        users[name] = role.lower()
    if users.get("admin") != "admin":
        raise ConfigError("--users must include admin:admin (start-up signs in as admin to check Airflow is ready)")
    return ",".join(f"{n}:{r}" for n, r in users.items())


def user_passwords(airflow_home: Path) -> dict[str, str]:
    """Every user's generated password, from SimpleAuthManager's passwords file (empty if
    it is not there yet)."""
    try:
        data = json.loads((airflow_home / PASSWORDS_FILE).read_text())
    except (OSError, ValueError):
        return {}
    return {str(k): str(v) for k, v in data.items()} if isinstance(data, dict) else {}


def other_users_line(airflow_home: Path, shown: str) -> str:
    """``other users: viewer password Y; ops password Z (in <file>)``: the generated
    passwords of every user but ``shown``, or ``""`` when there is none."""
    found = {name: password for name, password in user_passwords(airflow_home).items() if name != shown}
    if not found:
        return ""
    listed = "; ".join(f"{name} password {password}" for name, password in found.items())
    return f"other users: {listed} (in {airflow_home / PASSWORDS_FILE})"
