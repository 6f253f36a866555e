"""A Sleeper connection's fields become a configuration (no Airflow needed)."""

from __future__ import annotations

from pathlib import Path

import pytest
from psycopg.conninfo import conninfo_to_dict

from sleeper_ops.airflow.hooks.connection import config_from_connection, postgres_dsn
from sleeper_ops.config import SleeperConfig
from sleeper_ops.errors import ConfigError


@pytest.fixture(autouse=True)
def _no_dsn_override(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SLEEPER_STATE_STORE_DSN", raising=False)


def test_postgres_fields_become_a_dsn_with_every_part_encoded() -> None:
    dsn = postgres_dsn("db.example", 6543, "sleeper", "p@ss:w/rd", "tables")
    assert conninfo_to_dict(dsn) == {"host": "db.example", "port": "6543", "user": "sleeper",
                                     "password": "p@ss:w/rd", "dbname": "tables"}


def test_a_unix_socket_directory_as_host_and_the_default_database() -> None:
    parts = conninfo_to_dict(postgres_dsn("/run/pg sock", None, "me", None, None))
    assert parts == {"host": "/run/pg sock", "user": "me", "dbname": "sleeper"}


def test_connection_with_s3_and_spark_extras(tmp_path: Path) -> None:
    cfg = config_from_connection(host="db", port=5432, login="u", password="p", schema="s",
                                 extra={"object_store_uri": "s3://bucket/prefix", "endpoint_url": "http://127.0.0.1:9000",
                                        "region": "eu-west-2", "access_key": "a", "secret_key": "b",
                                        "spark_master": "spark://m:7077"},
                                 default_home=tmp_path)
    assert cfg.object_store_uri == "s3://bucket/prefix"
    assert cfg.s3 is not None
    assert cfg.s3.endpoint_url == "http://127.0.0.1:9000"
    assert (cfg.s3.region, cfg.s3.access_key, cfg.s3.secret_key) == ("eu-west-2", "a", "b")
    assert cfg.spark_master == "spark://m:7077"
    assert cfg.state_store_backend == "postgres"
    assert conninfo_to_dict(cfg.state_store_dsn or "")["dbname"] == "s"


def test_no_host_means_the_embedded_server_under_home(tmp_path: Path) -> None:
    cfg = config_from_connection(host=None, port=None, login=None, password=None, schema=None,
                                 extra={"home": str(tmp_path / "h")}, default_home=tmp_path)
    assert cfg.state_store_dsn is None
    assert cfg.embedded_pg_dir == (tmp_path / "h" / "pg").absolute()
    assert cfg.object_store_uri == str((tmp_path / "h" / "data").absolute())


def test_the_python_iterator_modules_extra_is_the_allow_list(tmp_path: Path) -> None:
    def modules(extra: dict) -> tuple[str, ...]:
        return config_from_connection(host="db", port=None, login=None, password=None, schema=None, extra=extra,
                                      default_home=tmp_path).python_iterator_modules
    assert modules({}) == ()
    assert modules({"python_iterator_modules": ["acme.iterators"]}) == ("acme.iterators",)
    # the connection form gives text: comma-separated modules
    assert modules({"python_iterator_modules": "acme.iterators, b"}) == ("acme.iterators", "b")
    with pytest.raises(ConfigError, match="iterators.python_modules"):
        modules({"python_iterator_modules": 5})


def test_unknown_extra_keys_are_refused_by_name(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="object_store_url"):
        config_from_connection(host="db", port=None, login=None, password=None, schema=None,
                               extra={"object_store_url": "s3://typo"}, default_home=tmp_path)


def test_an_endpoint_that_is_not_a_url_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="endpoint_url"):
        config_from_connection(host="db", port=None, login=None, password=None, schema=None,
                               extra={"object_store_uri": "s3://b/p", "endpoint_url": "127.0.0.1:9000"},
                               default_home=tmp_path)


def test_the_dynamodb_state_store_takes_region_endpoint_and_keys_from_the_aws_connection(tmp_path: Path) -> None:
    from sleeper_ops.airflow.hooks.connection import aws_conn_id_of

    extra = {"state_store": "dynamodb", "object_store_uri": "s3://sleeper-data/data", "dynamodb_table_prefix": "t-"}
    aws = {"region": "eu-west-2", "endpoint_url": "http://127.0.0.1:5999", "access_key": "AK", "secret_key": "SK"}
    assert aws_conn_id_of(extra) == "aws_default"
    cfg = config_from_connection(host=None, port=None, login=None, password=None, schema=None, extra=extra,
                                 default_home=tmp_path, aws=aws)
    assert cfg.state_store_backend == "dynamodb"
    d = cfg.dynamodb
    assert (d.region, d.endpoint_url, d.table_prefix, d.access_key, d.secret_key) == (
        "eu-west-2", "http://127.0.0.1:5999", "t-", "AK", "SK")
    assert cfg.s3 is not None
    assert (cfg.s3.endpoint_override, cfg.s3.scheme, cfg.s3.region, cfg.s3.access_key, cfg.s3.secret_key) == (
        "127.0.0.1:5999", "http", "eu-west-2", "AK", "SK")


def test_the_extras_own_s3_settings_override_the_aws_connections(tmp_path: Path) -> None:
    cfg = config_from_connection(host="db", port=None, login="u", password=None, schema=None,
                                 extra={"object_store_uri": "s3://b/p", "aws_conn_id": "mine", "region": "us-west-1"},
                                 default_home=tmp_path, aws={"region": "eu-west-2", "access_key": "AK"})
    assert cfg.state_store_backend == "postgres"
    assert cfg.s3 is not None and (cfg.s3.region, cfg.s3.access_key) == ("us-west-1", "AK")


def test_an_unknown_state_store_is_refused_naming_the_choices(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="state_store 'sqlite'.*postgres, dynamodb"):
        config_from_connection(host=None, port=None, login=None, password=None, schema=None,
                               extra={"state_store": "sqlite"}, default_home=tmp_path)


def test_no_aws_connection_is_read_unless_named_or_dynamodb() -> None:
    from sleeper_ops.airflow.hooks.connection import aws_conn_id_of

    assert aws_conn_id_of({"object_store_uri": "s3://b/p"}) is None
    assert aws_conn_id_of({"aws_conn_id": "prod_aws"}) == "prod_aws"


def test_a_connection_naming_a_config_home_opens_the_sleeper_its_sleeper_toml_configures(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    (home / "sleeper.toml").write_text('[object_store]\nuri = "/srv/lake"\n[spark]\nmaster = "local[3]"\n'
                                       '[iterators]\npython_modules = ["mine"]\n')
    cfg = config_from_connection(host=None, port=None, login=None, password=None, schema=None,
                                 extra={"config_home": str(home)}, default_home=tmp_path / "elsewhere")
    assert cfg == SleeperConfig.load(home, create=False)
    assert (cfg.home, cfg.object_store_uri, cfg.spark_master) == (home, "/srv/lake", "local[3]")


def test_a_config_home_with_other_fields_is_refused_in_one_line_naming_them(tmp_path: Path) -> None:
    (tmp_path / "sleeper.toml").write_text("")
    with pytest.raises(ConfigError, match=r"^config_home .* also sets host, object_store_uri") as e:
        config_from_connection(host="db", port=None, login=None, password=None, schema=None,
                               extra={"config_home": str(tmp_path), "object_store_uri": "/x"}, default_home=tmp_path)
    assert "\n" not in str(e.value)


def test_a_config_home_without_a_sleeper_toml_is_refused_naming_it(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=f"config_home {tmp_path}"):
        config_from_connection(host=None, port=None, login=None, password=None, schema=None,
                               extra={"config_home": str(tmp_path)}, default_home=tmp_path)
    assert not (tmp_path / "sleeper.toml").exists(), "never creates one"
