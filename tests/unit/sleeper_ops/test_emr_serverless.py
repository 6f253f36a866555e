"""The EMR Serverless bulk import's pure parts: the job request from table properties,
the package's configuration (no secret in it), and the names the deploy docs cite."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from sleeper_ops.config import SleeperConfig
from sleeper_ops.errors import ConfigError
from sleeper_ops.spark.emr_serverless import job_config, job_request
from statestore.catalog import TableInfo
from statestore.properties import PROPERTY_DEFS
from statestore.schema import Schema

DOCS = Path(__file__).resolve().parents[3] / "docs"
SCHEMA = Schema.from_dict({"rowKeyFields": [{"name": "key", "type": "StringType"}]})
EMR = {"sleeper.table.bulk.import.platform": "emr_serverless",
       "sleeper.table.bulk.import.emr.serverless.application.id": "00fabc",
       "sleeper.table.bulk.import.emr.serverless.execution.role.arn": "arn:aws:iam::111122223333:role/r",
       "sleeper.table.bulk.import.emr.serverless.package": "s3://artifacts/emr/"}


def test_the_job_request_runs_the_packaged_entry_point_with_the_import_key_and_no_secret():
    r = job_request(TableInfo("tid", "events", SCHEMA, dict(EMR)), sources="s3://raw/a/,s3://raw/b/",
                    import_key="tid/2026-01-02T00:00:00+00:00", run_id="run-1")
    submit = r.job_driver["sparkSubmit"]
    assert (r.application_id, r.execution_role_arn) == ("00fabc", "arn:aws:iam::111122223333:role/r")
    assert submit["entryPoint"] == "s3://artifacts/emr/bulk_import.py"
    assert submit["entryPointArguments"] == [
        "--config-file", "s3://artifacts/emr/sleeper.toml", "--table", "events", "--sources",
        "s3://raw/a/,s3://raw/b/", "--import-key", "tid/2026-01-02T00:00:00+00:00", "--run-id", "run-1"]
    assert "spark.submit.pyFiles=s3://artifacts/emr/sleeper.zip" in submit["sparkSubmitParameters"]


def test_a_job_request_without_the_emr_properties_names_what_is_missing():
    with pytest.raises(ConfigError, match="emr.serverless.application.id"):
        job_request(TableInfo("tid", "events", SCHEMA, {}), sources="s", import_key="k", run_id="r")


def test_the_packaged_configuration_drops_keys_and_the_dsn_password(tmp_path):
    config = SleeperConfig.from_dict(tmp_path, {
        "object_store": {"uri": "s3://data/sleeper", "region": "eu-west-2", "access_key": "AK", "secret_key": "SK"},
        "state_store": {"backend": "postgres", "dsn": "postgresql://sleeper:hunter22@db.example:5432/sleeper"}})
    doc = job_config(config)
    text = repr(doc)
    assert "AK" not in text and "SK" not in text and "hunter22" not in text
    assert doc["state_store"]["dsn"] == "postgresql://sleeper@db.example:5432/sleeper"
    assert doc["object_store"] == {"uri": "s3://data/sleeper", "scheme": "https", "region": "eu-west-2"}


def test_a_local_object_store_cannot_be_packaged_for_emr(tmp_path):
    with pytest.raises(ConfigError, match="not on S3"):
        job_config(SleeperConfig.from_dict(tmp_path, {}))


@pytest.mark.parametrize("page", ["deploy.md", "usage/bulk-import.md"])
def test_every_table_property_the_deploy_docs_cite_exists(page):
    cited = re.findall(r"(sleeper\.table\.[a-z0-9_.]*[a-z0-9_])(\.\*)?", (DOCS / page).read_text())
    unknown = {name for name, star in cited if not (any(d.startswith(name + ".") for d in PROPERTY_DEFS) if star
                                                    else name in PROPERTY_DEFS)}
    assert cited and not unknown, unknown


def test_bulk_import_package_refuses_a_table_and_a_local_object_store(tmp_path, capsys):
    from tests.unit.sleeper_ops.cli_runner import invoke_cli

    code, _, err = invoke_cli(capsys, "--home", str(tmp_path), "bulk-import", "events", "--package", str(tmp_path))
    assert code != 0 and "--package takes no TABLE" in err
    code, _, err = invoke_cli(capsys, "--home", str(tmp_path), "bulk-import", "--package", str(tmp_path / "pkg"))
    assert code == 1 and "no configuration at" in err
    (tmp_path / "sleeper.toml").write_text('[object_store]\nuri = "data"\n')
    code, _, err = invoke_cli(capsys, "--home", str(tmp_path), "bulk-import", "--package", str(tmp_path / "pkg"))
    assert code == 1 and "not on S3: an EMR Serverless job cannot reach it" in err
    assert not (tmp_path / "pkg").exists()
    code, _, err = invoke_cli(capsys, "--home", str(tmp_path), "bulk-import")
    assert code != 0 and "give TABLE and SOURCES" in err
