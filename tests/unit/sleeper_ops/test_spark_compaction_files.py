"""The spark runner without Spark: jobs/results/configuration files, the command line,
and what the submitter reports when spark-submit fails or reports only some jobs (a fake
spark-submit script stands in for Spark)."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pytest

from sleeper_ops.compaction.execute import JobResult
from sleeper_ops.compaction.jobs import CompactionJob, create_compaction_jobs
from sleeper_ops.compaction.runners import load_batch_runner
from sleeper_ops.config import SleeperConfig
from sleeper_ops.errors import ConfigError
from sleeper_ops.spark.batch_files import (
    SparkBatchError,
    read_config_file,
    read_jobs_file,
    read_results_file,
    write_config_file,
    write_jobs_file,
    write_results_file,
)
from sleeper_ops.spark.driver import _parse_args
from sleeper_ops.spark.executor import table_from_dict, table_to_dict
from sleeper_ops.spark.submit import (
    app_arguments,
    batch_runner,
    spark_app_path,
    spark_submit_command,
    submit_compaction_batch,
)

SCHEMA = {
    "rowKeyFields": [{"name": "key", "type": "StringType"}],
    "sortKeyFields": [],
    "valueFields": [{"name": "v", "type": "LongType"}],
}


def job(n: int, whole: bool = True) -> CompactionJob:
    return CompactionJob("tid", f"job-{n}", f"p{n}", (f"data/a{n}.parquet", f"data/b{n}.parquet"), whole, 10 * n)


def test_jobs_file_round_trips(tmp_path):
    jobs = [job(1), job(2, whole=False)]
    path = str(tmp_path / "sub" / "jobs.json")
    write_jobs_file(path, "events", jobs, table_id="tid", run_id="dag/run")
    batch = read_jobs_file(path)
    assert batch.table == "events" and batch.table_id == "tid" and batch.run_id == "dag/run"
    assert list(batch.jobs) == jobs
    assert not os.path.exists(path + f".{os.getpid()}.tmp"), "written by rename, no temporary left"


def test_results_file_round_trips_and_ignores_unknown_jobs(tmp_path):
    jobs = [job(1), job(2)]
    results = [JobResult(jobs[0], "committed", 100, 90, 1.5, "t/data/out.parquet"),
               JobResult(jobs[1], "failed", reason="OSError: gone"),
               JobResult(job(3), "committed", 1, 1, 0.1, "x")]
    path = str(tmp_path / "results.json")
    write_results_file(path, results)
    back = read_results_file(path, jobs)
    assert back == {"job-1": results[0], "job-2": results[1]}


@pytest.mark.parametrize("content", ["not json", json.dumps({"version": 99, "jobs": []}), json.dumps([1])])
def test_a_file_of_another_kind_or_version_is_refused(tmp_path, content):
    path = tmp_path / "f.json"
    path.write_text(content)
    with pytest.raises(SparkBatchError, match="f.json"):
        read_jobs_file(str(path))
    with pytest.raises(SparkBatchError, match="f.json"):
        read_results_file(str(path), [])


def test_a_missing_file_is_refused_with_its_name(tmp_path):
    with pytest.raises(SparkBatchError, match="nothing.json"):
        read_jobs_file(str(tmp_path / "nothing.json"))


def test_table_round_trips_as_plain_data(sleeper):
    t = sleeper.create_table("t", SCHEMA, properties={"sleeper.table.compaction.strategy": "basic"})
    plain = json.loads(json.dumps(table_to_dict(t.info)))
    assert table_from_dict(plain) == t.info


# ----- the submitter, with a fake spark-submit ------------------------------------------------

def fake_spark_submit(tmp_path: Path, body: str) -> str:
    """An executable standing in for spark-submit; ``body`` is Python with ``args`` (argv)."""
    path = tmp_path / "fake-spark-submit"
    path.write_text(f"#!{sys.executable}\nimport json, sys\nargs = sys.argv[1:]\n{body}\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return str(path)


@pytest.fixture
def config(tmp_path):
    return SleeperConfig.from_dict(tmp_path, {"state_store": {"backend": "memory"}, "spark": {"master": "local[2]"}})


@pytest.fixture
def assigned(sleeper):
    """A table with 3 leaves of 2 files each, and its 3 assigned jobs."""
    t = sleeper.create_table("t", SCHEMA, split_points=["h", "p"],
                             properties={"sleeper.table.compaction.strategy": "basic"})
    for i in range(2):
        t.ingest(pa.table({"key": ["a", "k", "z"], "v": [i, i, i]}))
    jobs = create_compaction_jobs(sleeper.state_store, t.info).jobs
    assert len(jobs) == 3
    return t, jobs


def test_failing_spark_submit_fails_every_job_with_the_tail_of_its_log(sleeper, config, assigned, tmp_path):
    t, jobs = assigned
    fake = fake_spark_submit(tmp_path, "print('starting', file=sys.stderr)\n"
                                       "print('Exception: no executors', file=sys.stderr)\nsys.exit(3)")

    results = submit_compaction_batch(config, sleeper.state_store, t.info, jobs, spark_submit=fake)

    assert [r.job for r in results] == jobs and {r.status for r in results} == {"failed"}
    for r in results:
        assert "code 3" in r.reason and "no executors" in r.reason
        rec = sleeper.state_store.get_job(t.info.table_id, r.job.job_id)
        assert rec.status == "failed" and rec.reason == r.reason
    assert all(ref.job_id is not None for ref in t.state().references.values()), "inputs stay assigned for a retry"


def test_jobs_the_driver_reported_are_taken_from_the_results_file(sleeper, config, assigned, tmp_path):
    """A result per reported job; an unreported job the driver had committed keeps its
    committed record; any other unreported job is recorded failed."""
    t, jobs = assigned
    store = sleeper.state_store
    store.put_job(store.get_job(t.info.table_id, jobs[1].job_id).started("r").finished(6, 6, "out-1").committed())
    reported = {"job_id": jobs[0].job_id, "status": "committed", "rows_read": 4, "rows_written": 4,
                "seconds": 0.5, "output": "out-0", "reason": None}
    fake = fake_spark_submit(tmp_path, f"""
jobs = json.load(open(args[args.index('--jobs-file') + 1]))
assert jobs['table'] == 't' and len(jobs['jobs']) == 3
assert args[args.index('--run-id') + 1] == 'run-7' and args[args.index('--master') + 1] == 'local[2]'
json.dump({{'version': 1, 'error': None, 'results': [{reported!r}]}},
          open(args[args.index("--results-file") + 1], "w"))""")

    results = submit_compaction_batch(config, store, t.info, jobs, run_id="run-7", spark_submit=fake)

    assert results[0] == JobResult(jobs[0], "committed", 4, 4, 0.5, "out-0")
    assert results[1].status == "committed" and results[1].rows_written == 6 and results[1].output == "out-1"
    assert results[2].status == "failed" and results[2].reason == "spark-submit reported no result"
    assert store.get_job(t.info.table_id, jobs[2].job_id).status == "failed"
    assert store.get_job(t.info.table_id, jobs[1].job_id).status == "committed"


def test_a_batch_over_its_timeout_is_killed_and_its_jobs_failed(sleeper, config, assigned, tmp_path):
    t, jobs = assigned
    fake = fake_spark_submit(tmp_path, "import time\ntime.sleep(60)")
    results = submit_compaction_batch(config, sleeper.state_store, t.info, jobs, spark_submit=fake, timeout=0.5)
    assert {r.status for r in results} == {"failed"} and "killed after 0.5 s" in results[0].reason


def test_no_jobs_runs_nothing(sleeper, config, assigned):
    t, _ = assigned
    assert submit_compaction_batch(config, sleeper.state_store, t.info, [], spark_submit="/nonexistent") == []


def test_command_line_names_master_safe_settings_app_and_batch(config):
    cmd = spark_submit_command(config, "events", jobs_file="j.json", results_file="r.json", run_id="r1",
                               spark_submit="spark-submit", conf={"spark.executor.memory": "2g"})
    assert cmd[:5] == ["spark-submit", "--master", "local[2]", "--name", "sleeper-compaction-events"]
    confs = {cmd[i + 1] for i, a in enumerate(cmd) if a == "--conf"}
    assert {"spark.ui.enabled=false", "spark.driver.host=127.0.0.1", "spark.executor.memory=2g"} <= confs
    app = cmd.index(str(spark_app_path()))
    assert cmd[app + 1:] == ["--home", str(config.home), "--table", "events", "--jobs-file", "j.json",
                             "--results-file", "r.json", "--run-id", "r1"]
    assert spark_app_path().is_file()


def test_command_line_with_a_config_file_passes_it_instead_of_the_home(config):
    cmd = spark_submit_command(config, "events", jobs_file="j.json", config_file="c.toml", spark_submit="s")
    app = cmd.index(str(spark_app_path()))
    assert cmd[app + 1:] == ["--config-file", "c.toml", "--table", "events", "--jobs-file", "j.json"]


def test_app_arguments_name_the_home_or_the_config_file(config):
    assert app_arguments(config, "t") == ["--home", str(config.home), "--table", "t"]
    assert app_arguments(config, "t", results_file="r.json", run_id="r1", config_file="/tmp/x/c.toml") == [
        "--config-file", "/tmp/x/c.toml", "--table", "t", "--results-file", "r.json", "--run-id", "r1"]


# ----- the configuration file ---------------------------------------------------------------

S3_CONFIG = {"object_store": {"uri": "s3://bucket/tables", "endpoint_override": "127.0.0.1:9000", "scheme": "http",
                              "region": "eu-west-2", "access_key": "ak", "secret_key": "sk"},
             "state_store": {"backend": "postgres", "dsn": "postgresql://u:secret@db/sleeper"},
             "spark": {"master": "spark://m:7077"}, "airflow": {"home": "/opt/airflow"}}


@pytest.mark.parametrize("raw", [{}, {"state_store": {"backend": "memory", "embedded_dir": "/var/pg"}}, S3_CONFIG],
                         ids=["defaults", "memory-absolute-paths", "s3-and-dsn"])
def test_config_round_trips_through_to_dict(tmp_path, monkeypatch, raw):
    monkeypatch.delenv("SLEEPER_STATE_STORE_DSN", raising=False)
    cfg = SleeperConfig.from_dict(tmp_path, raw)
    assert SleeperConfig.from_dict(tmp_path, cfg.to_dict()) == cfg


def test_config_round_trip_keeps_the_dsn_of_the_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("SLEEPER_STATE_STORE_DSN", "postgresql://from-env/db")
    cfg = SleeperConfig.from_dict(tmp_path, {"state_store": {"dsn": "postgresql://from-file/db"}})
    assert cfg.state_store_dsn == "postgresql://from-env/db"
    assert cfg.to_dict()["state_store"]["dsn"] == "postgresql://from-env/db"
    assert SleeperConfig.from_dict(tmp_path, cfg.to_dict()) == cfg
    monkeypatch.delenv("SLEEPER_STATE_STORE_DSN")
    assert SleeperConfig.from_dict(tmp_path, cfg.to_dict()) == cfg, "the DSN is in the dict, not only in the env"


def test_config_of_a_relative_home_round_trips(tmp_path, monkeypatch):
    monkeypatch.delenv("SLEEPER_STATE_STORE_DSN", raising=False)
    monkeypatch.chdir(tmp_path)
    cfg = SleeperConfig.from_dict(Path("rel-home"), {})
    assert cfg.to_dict()["object_store"] == {"uri": "data"}
    assert SleeperConfig.from_dict(Path("rel-home"), cfg.to_dict()) == cfg


def test_config_file_round_trips_privately_with_an_absolute_home(tmp_path, monkeypatch):
    monkeypatch.delenv("SLEEPER_STATE_STORE_DSN", raising=False)
    cfg = SleeperConfig.from_dict(tmp_path / "home", S3_CONFIG)
    path = tmp_path / "batch" / "sleeper.toml"
    write_config_file(str(path), cfg)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600, "the file may hold a DSN password and S3 keys"
    assert read_config_file(str(path)) == cfg == SleeperConfig.from_file(path)
    assert list(path.parent.iterdir()) == [path], "written by rename, no temporary left"

    monkeypatch.chdir(tmp_path)
    relative = SleeperConfig.from_dict(Path("home"), {})
    write_config_file(path, relative)
    monkeypatch.chdir(path.parent)
    back = read_config_file(path)
    assert back.home == tmp_path / "home" and back.object_store_uri == str(tmp_path / "home" / "data"), \
        "relative paths keep their meaning when read from another directory"


def test_config_file_without_home_is_at_home_in_its_directory(tmp_path, monkeypatch):
    monkeypatch.delenv("SLEEPER_STATE_STORE_DSN", raising=False)
    (tmp_path / "sleeper.toml").write_text('[spark]\nmaster = "local[3]"\n')
    cfg = SleeperConfig.from_file(tmp_path / "sleeper.toml")
    assert cfg == SleeperConfig.from_dict(tmp_path, {"spark": {"master": "local[3]"}})


@pytest.mark.parametrize("content", [None, "not = [toml", 'home = 3\n'], ids=["missing", "invalid", "bad-home"])
def test_a_bad_config_file_is_refused_with_its_name(tmp_path, content):
    path = tmp_path / "conf.toml"
    if content is not None:
        path.write_text(content)
    with pytest.raises(ConfigError, match="conf.toml"):
        read_config_file(path)


def test_the_submitter_hands_the_driver_a_config_file(sleeper, config, assigned, tmp_path, monkeypatch):
    monkeypatch.delenv("SLEEPER_STATE_STORE_DSN", raising=False)
    t, jobs = assigned
    seen = tmp_path / "seen.toml"
    fake = fake_spark_submit(tmp_path, f"""
import shutil
assert '--home' not in args
shutil.copy(args[args.index('--config-file') + 1], {str(seen)!r})
sys.exit(1)""")

    results = submit_compaction_batch(config, sleeper.state_store, t.info, jobs, spark_submit=fake)

    assert {r.status for r in results} == {"failed"} and "code 1" in results[0].reason
    assert SleeperConfig.from_file(seen) == config


def test_the_core_loads_the_spark_runner_by_name(sleeper, config, assigned):
    t, _ = assigned
    assert load_batch_runner("spark") is batch_runner
    assert batch_runner(config, sleeper.state_store, "run-1")(t.info, []) == []


def test_the_driver_takes_a_home_or_a_config_file_not_both(capsys):
    args = _parse_args(["--config-file", "c.toml", "--table", "t"])
    assert args.config_file == "c.toml" and args.home is None
    assert _parse_args(["--home", "h", "--table", "t"]).home == "h"
    with pytest.raises(SystemExit):
        _parse_args(["--home", "h", "--config-file", "c.toml", "--table", "t"])
    assert "not allowed with" in capsys.readouterr().err


def test_only_the_drivers_main_imports_pyspark():
    code = ("import sys, sleeper_ops.spark.batch_files, sleeper_ops.spark.submit, sleeper_ops.spark.executor, "
            "sleeper_ops.spark.driver; assert 'pyspark' not in sys.modules, 'pyspark imported'")
    subprocess.run([sys.executable, "-c", code], check=True)
