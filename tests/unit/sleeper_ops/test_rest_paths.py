"""The allowed ingest prefixes: the path rules of sleeper_ops.web.rest_paths and the
``ingest.allowed_prefixes`` setting of sleeper.toml."""

from __future__ import annotations

from pathlib import Path

import pytest

from sleeper_ops.config import SleeperConfig
from sleeper_ops.errors import ConfigError
from sleeper_ops.web.rest_paths import IngestPathError, check_ingest_paths


@pytest.fixture
def tree(tmp_path: Path) -> tuple[Path, Path]:
    """``in/`` (allowed) holding a.csv, a link to a.csv and a link to ``secret.csv`` beside it."""
    allowed = tmp_path / "in"
    (allowed / "deep").mkdir(parents=True)
    (allowed / "a.csv").write_text("k\n1\n")
    (tmp_path / "secret.csv").write_text("k\n2\n")
    (allowed / "deep" / "link.csv").symlink_to(allowed / "a.csv")
    (allowed / "out.csv").symlink_to(tmp_path / "secret.csv")
    (allowed / "dirlink").symlink_to(tmp_path)
    return tmp_path, allowed


def refused(files: list[str], prefixes: list[str]) -> str:
    with pytest.raises(IngestPathError) as e:
        check_ingest_paths(files, prefixes)
    return str(e.value)


def test_files_under_a_local_prefix_are_resolved(tree: tuple[Path, Path]) -> None:
    root, allowed = tree
    a = str(allowed / "a.csv")
    assert check_ingest_paths([a, str(allowed / "deep" / "link.csv"), f"{allowed}/deep/../a.csv"],
                              [str(allowed)]) == [a, a, a]
    assert check_ingest_paths([str(allowed / "not-yet.csv")], [str(allowed) + "/"]) == [str(allowed / "not-yet.csv")]


@pytest.mark.parametrize("name", ["secret", "traversal", "link-out", "dir-link-out", "relative", "file-uri", "prefix",
                                  "lookalike", "nul", "empty", "http", "s3"])
def test_local_paths_that_lead_out_of_the_prefix_are_refused(tree: tuple[Path, Path], name: str) -> None:
    root, allowed = tree
    bad = {"secret": str(root / "secret.csv"), "traversal": f"{allowed}/../secret.csv",
           "link-out": str(allowed / "out.csv"), "dir-link-out": str(allowed / "dirlink" / "secret.csv"),
           "relative": "in/a.csv", "file-uri": f"file://{allowed}/a.csv", "prefix": str(allowed),
           "lookalike": f"{allowed}x/a.csv", "nul": f"{allowed}/a.csv\x00", "empty": "",
           "http": "http://127.0.0.1/a.csv", "s3": "s3://bucket/in/a.csv"}[name]
    message = refused([str(allowed / "a.csv"), bad], [str(allowed)])
    assert "ingest.allowed_prefixes" in message
    assert repr(bad) in message and repr(str(allowed / "a.csv")) not in message, "names the refused file only"
    # no path of the server's: not the prefix, not where a link leads (only the client's own string)
    rest = message.replace(repr(bad), "")
    assert str(allowed) not in rest and str(root / "secret.csv") not in rest, rest


def test_s3_uris_match_bucket_and_whole_key_segments() -> None:
    prefixes = ["s3://bucket/in", "s3://whole-bucket"]
    ok = ["s3://bucket/in/a.parquet", "s3://bucket/in/x/y.csv", "s3://whole-bucket/anything.jsonl"]
    assert check_ingest_paths(ok, prefixes) == ok
    for bad in ["s3://bucket/inx/a.parquet", "s3://bucket/a.parquet", "s3://bucket/in", "s3://other/in/a.parquet",
                "s3://bucket/in/../a.parquet", "s3://bucket/in/./a.parquet", "s3://bucket/in//a.parquet",
                "s3://bucketx/in/a.parquet", "s3:///in/a.parquet", "S3://bucket/in/a.parquet",
                "s3a://bucket/in/a.parquet"]:
        assert "allowed ingest prefixes" in refused([bad], prefixes), bad


def test_no_prefix_allows_nothing(tree: tuple[Path, Path]) -> None:
    _, allowed = tree
    assert "not under an allowed prefix" in refused([str(allowed / "a.csv")], [])


def test_a_tables_area_is_refused_whatever_the_prefixes_allow(tree: tuple[Path, Path]) -> None:
    _, allowed = tree
    (allowed / "t1").mkdir()
    (allowed / "t1" / "f.parquet").write_text("x")
    for bad, areas in [(str(allowed / "t1" / "f.parquet"), [str(allowed / "t1")]),
                       ("s3://b/store/t1/data/f.parquet", ["s3://b/store/t1"])]:
        with pytest.raises(IngestPathError, match="own data in the object store"):
            check_ingest_paths([bad], [str(allowed), "s3://b/store"], areas)
    assert check_ingest_paths(["s3://b/store/t10/f.parquet"], ["s3://b/store"], ["s3://b/store/t1"]) == [
        "s3://b/store/t10/f.parquet"]


def test_the_setting_defaults_to_the_stores_ingest_folder_and_home_ingest(tmp_path: Path) -> None:
    config = SleeperConfig.from_dict(tmp_path, {})
    assert config.ingest_prefixes() == (str(tmp_path / "data" / "ingest"), str(tmp_path / "ingest"))
    s3 = SleeperConfig.from_dict(tmp_path, {"object_store": {"uri": "s3://b/p"}})
    assert s3.ingest_prefixes() == ("s3://b/p/ingest", str(tmp_path / "ingest"))
    assert "ingest" not in config.to_dict(), "the default is not written out"


def test_the_setting_is_read_made_absolute_and_written_back(tmp_path: Path) -> None:
    raw = {"ingest": {"allowed_prefixes": ["incoming", "/srv/drop", "s3://bucket/in/"]}}
    config = SleeperConfig.from_dict(tmp_path, raw)
    assert config.ingest_prefixes() == (str(tmp_path / "incoming"), "/srv/drop", "s3://bucket/in")
    assert SleeperConfig.from_dict(tmp_path, config.to_dict()) == config
    assert SleeperConfig.from_dict(tmp_path, {"ingest": {"allowed_prefixes": []}}).ingest_prefixes() == ()


@pytest.mark.parametrize("value", ["incoming", [1], [""], ["file:///srv"], ["http://x/y"]])
def test_a_bad_setting_is_a_config_error(tmp_path: Path, value: object) -> None:
    with pytest.raises(ConfigError, match="ingest.allowed_prefixes"):
        SleeperConfig.from_dict(tmp_path, {"ingest": {"allowed_prefixes": value}})
