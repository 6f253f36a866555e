"""A class-data-sharing archive of Spark's classes for the JVMs a test run starts.

Every Spark JVM of the test suite (a spark-submit's launcher and driver, an in-process
session's gateway, a standalone master, its workers and executors, the Spark service)
lives seconds and spends most of them loading and verifying the same few thousand
classes. A JVM given a dynamic CDS archive (``-XX:SharedArchiveFile``) maps them ready
made: a small local spark-submit job took 9.9 s of CPU, 6.4-7.2 s with it;
test_spark_compaction.py and test_bulk_import.py together 113.5 s, 83 s.

The archive is made once per machine and Spark/Java/Python version by a tiny job run with
``-XX:ArchiveClassesAtExit`` (about 25 s of CPU), under the user's cache directory
(``$XDG_CACHE_HOME`` or ``~/.cache``, like uv's), written under a temporary name and
renamed, so a JVM sees the whole archive or none. A test run starts making it in the
background when it is missing; a JVM started meanwhile (or one whose class path does not
match the archive's, like the launcher's) runs without it, silently (``-Xlog:cds=off``).
Tests only, like the rest of ``JAVA_TOOL_OPTIONS`` in tests/conftest.py.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import shutil
import subprocess
import sys
import tempfile
import threading
from importlib import metadata
from pathlib import Path
from typing import Optional

#: the JVM options that use the archive without a word when it is missing or does not match
QUIET = "-Xlog:cds=off -Xlog:cds+dynamic=off"

TRAINING_JOB = """
import sys
from pyspark.sql import SparkSession
spark = SparkSession.builder.master("local[2]").appName("sleeper-tests-cds").getOrCreate()
out = sys.argv[1]
spark.range(2000).selectExpr("id", "cast(id as string) as key").write.mode("overwrite").parquet(out)
df = spark.read.parquet(out).repartition(2, "key").sortWithinPartitions("key")
def double(batches):
    for b in batches:
        yield b
assert df.mapInArrow(double, df.schema).count() == 2000
spark.stop()
"""


def archive_path() -> Optional[Path]:
    """Where this machine's archive for the installed Spark, Java and Python is (None:
    no java or no pyspark, so no Spark test runs)."""
    java = shutil.which("java")
    spec = importlib.util.find_spec("pyspark")  # not imported: every test process runs this
    if java is None or spec is None:
        return None
    real = os.path.realpath(java)
    key = f"{metadata.version('pyspark')} {real} {os.stat(real).st_mtime_ns} {sys.version} {spec.origin}"
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "sleeper-tests"
    return cache / f"spark-cds-{hashlib.sha256(key.encode()).hexdigest()[:16]}.jsa"


def java_options(base: str, archive: Optional[Path]) -> str:
    """``base`` with the options that use ``archive`` (if any)."""
    return base if archive is None else f"{base} -XX:SharedArchiveFile={archive} {QUIET}"


def make_archive(archive: Path, base: str, timeout: float = 300.0) -> bool:
    """Run the training job with ``-XX:ArchiveClassesAtExit`` and move its archive into
    place; whether the archive is there now (a failure leaves none, and tests run as
    without it)."""
    archive.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="sleeper-cds-") as tmp:
        partial = Path(tmp) / "spark.jsa"
        job = Path(tmp) / "job.py"
        job.write_text(TRAINING_JOB)
        bin_dir = Path(sys.executable).parent
        env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}",
               "PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable,
               "JAVA_TOOL_OPTIONS": f"{base} -XX:ArchiveClassesAtExit={partial} {QUIET}"}
        try:
            done = subprocess.run([str(bin_dir / "spark-submit"), str(job), str(Path(tmp) / "out")], env=env,
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=timeout)
        except (OSError, subprocess.TimeoutExpired):
            return False
        if done.returncode != 0 or not partial.exists():
            return False
        staged = archive.with_name(f".{archive.name}.{os.getpid()}")  # same file system: the rename is atomic
        shutil.copyfile(partial, staged)
        os.replace(staged, archive)
    return archive.exists()


def make_in_background(archive: Path, base: str) -> threading.Thread:
    """:func:`make_archive` in a daemon thread (the run goes on meanwhile)."""
    thread = threading.Thread(target=make_archive, args=(archive, base), name="spark-cds", daemon=True)
    thread.start()
    return thread
