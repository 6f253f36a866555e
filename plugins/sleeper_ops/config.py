"""Configuration: ``SLEEPER_HOME/sleeper.toml``.

The first command that needs it writes a default file naming: the object store
(default ``SLEEPER_HOME/data``; or ``s3://bucket/prefix`` with an optional endpoint),
the state store (default the embedded PostgreSQL under ``SLEEPER_HOME/pg``; a DSN
replaces it), the Spark master (``local[*]``) and the Airflow home. Relative paths
are relative to ``SLEEPER_HOME``. Scaling out is a change here, not in code.
"""

from __future__ import annotations

import os
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

import tomli_w

from sleeper_ops.errors import ConfigError
from sleeper_ops.io.storage import S3Options

DEFAULT_HOME = ".sleeper"

DEFAULT_CONFIG: dict[str, Any] = {
    "object_store": {"uri": "data"},
    "state_store": {"backend": "postgres", "dsn": "", "embedded_dir": "pg"},
    "spark": {"master": "local[*]"},
    "airflow": {"home": "airflow"},
}


def default_home() -> Path:
    return Path(os.environ.get("SLEEPER_HOME", DEFAULT_HOME))


@dataclass(frozen=True)
class SleeperConfig:
    home: Path
    object_store_uri: str
    s3: Optional[S3Options]
    state_store_backend: str
    state_store_dsn: Optional[str]
    embedded_pg_dir: Path
    spark_master: str
    airflow_home: Path

    @classmethod
    def load(cls, home: Optional[os.PathLike[str] | str] = None, *, create: bool = True) -> SleeperConfig:
        """Read ``home/sleeper.toml``, writing the default first if it is missing."""
        h = Path(home) if home is not None else default_home()
        h = h.absolute()
        path = h / "sleeper.toml"
        if not path.exists():
            if not create:
                raise ConfigError(f"no configuration at {path}")
            h.mkdir(parents=True, exist_ok=True)
            path.write_text("# Sleeper configuration; see the README.\n" + tomli_w.dumps(DEFAULT_CONFIG))
        try:
            raw = tomllib.loads(path.read_text())
        except tomllib.TOMLDecodeError as e:
            raise ConfigError(f"{path} is not valid TOML: {e}") from e
        return cls.from_dict(h, raw)

    @classmethod
    def from_dict(cls, home: Path, raw: dict[str, Any]) -> SleeperConfig:
        obj = {**DEFAULT_CONFIG["object_store"], **raw.get("object_store", {})}
        ss = {**DEFAULT_CONFIG["state_store"], **raw.get("state_store", {})}
        spark = {**DEFAULT_CONFIG["spark"], **raw.get("spark", {})}
        airflow = {**DEFAULT_CONFIG["airflow"], **raw.get("airflow", {})}
        uri = str(obj["uri"])
        s3 = None
        if uri.startswith("s3://"):
            s3 = S3Options(endpoint_override=obj.get("endpoint_override") or None, scheme=obj.get("scheme", "https"),
                           region=obj.get("region") or None, access_key=obj.get("access_key") or None,
                           secret_key=obj.get("secret_key") or None)
        else:
            uri = str(_under(home, uri))
        backend = ss.get("backend", "postgres")
        if backend not in ("postgres", "memory"):
            raise ConfigError(f"state_store.backend must be postgres or memory, got {backend!r}")
        dsn = os.environ.get("SLEEPER_STATE_STORE_DSN") or ss.get("dsn") or None
        return cls(home, uri, s3, backend, dsn, _under(home, ss.get("embedded_dir", "pg")),
                   str(spark["master"]), _under(home, airflow["home"]))


def _under(home: Path, p: str) -> Path:
    q = Path(p)
    return q if q.is_absolute() else home / q
