"""Test support: a ``local[2]`` SparkSession in this process, and the py4j clean-up that
keeps a green run quiet."""

from __future__ import annotations

import os
import sys
from contextlib import contextmanager
from typing import Any, Iterator


def close_gateway() -> None:
    """Shut the py4j gateway (and its JVM) down now and collect its connections: each
    logs at INFO when it is closed, which from the garbage collector at interpreter exit
    goes to logging streams already closed (a ``--- Logging error ---`` after the run)."""
    import gc

    from pyspark import SparkContext

    gateway = SparkContext._gateway
    if gateway is not None:
        gateway.shutdown()
        SparkContext._gateway = SparkContext._jvm = None
        del gateway
        gc.collect()


@contextmanager
def local_session(app_name: str, **conf: str) -> Iterator[Any]:
    """A ``local[2]`` SparkSession (no UI, driver on 127.0.0.1, ``conf`` added) whose
    Python workers run this interpreter; stopped, with its JVM, on exit, and the
    PYSPARK_* variables it set put back."""
    from pyspark.sql import SparkSession

    saved = {k: os.environ.get(k) for k in ("PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON")}
    os.environ["PYSPARK_PYTHON"] = os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    builder = (SparkSession.builder.master("local[2]").appName(app_name)
               .config("spark.ui.enabled", "false").config("spark.driver.host", "127.0.0.1"))
    for key, value in conf.items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    try:
        yield session
    finally:
        session.stop()
        close_gateway()
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
