"""Table properties: names, defaults, value checks, and the catalog entry reading them."""

from __future__ import annotations

import pytest

from statestore import PropertyError, Schema, TableInfo
from statestore.properties import (
    PROPERTY_DEFS,
    apply_update,
    effective_properties,
    parse_size,
    validate_properties,
    validate_values,
)

SCHEMA = Schema.from_dict({"rowKeyFields": [{"name": "k", "type": "LongType"}]})


def test_every_property_of_the_design_is_defined_with_its_default():
    expected = {
        "sleeper.table.online": "true",
        "sleeper.table.partition.splitting.threshold": "1000000000",
        "sleeper.table.compaction.strategy": "sizeratio",
        "sleeper.table.compaction.files.batch.size": "12",
        "sleeper.table.compaction.strategy.sizeratio.ratio": "3",
        "sleeper.table.compaction.runner": "local",
        "sleeper.table.gc.delay.minutes": "15",
        "sleeper.table.parquet.rowgroup.rows.max": "2048",
        "sleeper.table.parquet.page.size": "131072",
        "sleeper.table.parquet.compression.codec": "zstd",
        "sleeper.table.iterator.ageoff": None,
        "sleeper.table.iterator.aggregation": None,
        "sleeper.table.ingest.batcher.job.min.size": "1G",
        "sleeper.table.ingest.batcher.job.max.size": "5G",
        "sleeper.table.ingest.batcher.job.max.files": "100",
        "sleeper.table.ingest.batcher.job.max.age.seconds": "300",
        "sleeper.table.bulk.import.min.leaf.partitions": "64",
        "sleeper.table.bulk.import.min.rows.per.leaf": "1000000",
    }
    for name, default in expected.items():
        assert PROPERTY_DEFS[name].default == default, name
    for op in ("split", "compaction", "gc", "ingest_batcher", "flush"):
        assert f"sleeper.table.schedule.{op}" in PROPERTY_DEFS
    assert all(d.description for d in PROPERTY_DEFS.values())


@pytest.mark.parametrize("name, value", [
    ("sleeper.table.online", "false"),
    ("sleeper.table.online", "TRUE"),
    ("sleeper.table.partition.splitting.threshold", "5"),
    ("sleeper.table.compaction.strategy", "basic"),
    ("sleeper.table.compaction.runner", "spark"),
    ("sleeper.table.gc.delay.minutes", "1"),
    ("sleeper.table.parquet.compression.codec", "snappy"),
    ("sleeper.table.iterator.ageoff", "ts:86400000"),
    ("sleeper.table.iterator.aggregation", "sum(a), max(b),min(c)"),
    ("sleeper.table.ingest.batcher.job.min.size", "512M"),
    ("sleeper.table.ingest.batcher.job.max.size", "1024"),
    ("sleeper.table.schedule.compaction", "*/5 * * * *"),
    ("sleeper.table.schedule.gc", "@daily"),
    ("sleeper.table.schedule.split", "none"),
    ("sleeper.table.iterator.python", "my_pkg.iterators:drop_nulls"),
    ("sleeper.table.gc.orphan.grace.minutes", "45"),
    ("sleeper.table.compaction.job.retry.minutes", "45"),
    ("sleeper.table.gc.job.abandon.minutes", "60"),
])
def test_valid_values_are_accepted_as_given(name, value):
    assert validate_properties({name: value}) == {name: value}


@pytest.mark.parametrize("name, value, message", [
    ("sleeper.table.online", "yes", "expected true or false"),
    ("sleeper.table.partition.splitting.threshold", "0", "positive integer"),
    ("sleeper.table.partition.splitting.threshold", "-3", "positive integer"),
    ("sleeper.table.partition.splitting.threshold", "1e9", "positive integer"),
    ("sleeper.table.compaction.files.batch.size", "²", "positive integer"),
    ("sleeper.table.gc.delay.minutes", "-1", "non-negative integer"),
    ("sleeper.table.gc.delay.minutes", "²", "non-negative integer"),
    ("sleeper.table.gc.delay.minutes", "0", "must be at least 1: queries planned against a file"),
    ("sleeper.table.gc.orphan.grace.minutes", "0", "must be at least 10"),
    ("sleeper.table.gc.orphan.grace.minutes", "9", "must be at least 10"),
    ("sleeper.table.compaction.job.retry.minutes", "0", "must be at least 1"),
    ("sleeper.table.gc.job.abandon.minutes", "5", "must be at least 10"),
    ("sleeper.table.compaction.strategy", "leveled", "expected one of sizeratio, basic"),
    ("sleeper.table.compaction.runner", "ray", "expected one of local, spark"),
    ("sleeper.table.parquet.compression.codec", "brotli", "expected one of"),
    ("sleeper.table.iterator.python", "my_pkg.iterators", "module.path:function"),
    ("sleeper.table.iterator.python", "os; rm -rf:x", "module.path:function"),
    ("sleeper.table.gc.batch.size", "0", "positive integer"),
    ("sleeper.table.bulk.import.min.rows.per.leaf", "0", "positive integer"),
    ("sleeper.table.bulk.import.min.rows.per.leaf", "1M", "positive integer"),
    ("sleeper.table.iterator.ageoff", "ts", "FIELD:MAX_AGE_MS"),
    ("sleeper.table.iterator.ageoff", ":100", "FIELD:MAX_AGE_MS"),
    ("sleeper.table.iterator.ageoff", "ts:1h", "FIELD:MAX_AGE_MS"),
    ("sleeper.table.iterator.ageoff", "ts:²", "FIELD:MAX_AGE_MS"),
    ("sleeper.table.iterator.aggregation", "avg(a)", "sum\\(f1\\),max\\(f2\\)"),
    ("sleeper.table.iterator.aggregation", "sum(a),", "sum\\(f1\\)"),
    ("sleeper.table.ingest.batcher.job.min.size", "1.5G", "not a size"),
    ("sleeper.table.ingest.batcher.job.min.size", "1P", "not a size"),
    ("sleeper.table.ingest.batcher.job.min.size", "١G", "not a size"),
    ("sleeper.table.schedule.compaction", "*/5 * *", "5-field cron"),
    ("sleeper.table.schedule.compaction", "@sometimes", "5-field cron"),
])
def test_values_of_the_wrong_type_are_refused_naming_the_property(name, value, message):
    with pytest.raises(PropertyError, match=message) as e:
        validate_properties({name: value})
    assert name in str(e.value)


def test_unknown_property_is_refused_by_name():
    with pytest.raises(PropertyError, match="unknown table property 'sleeper.table.colour'"):
        validate_properties({"sleeper.table.online": "true", "sleeper.table.colour": "blue"})


def test_an_empty_value_means_the_default_at_create_and_clears_in_an_update():
    assert validate_properties({"sleeper.table.gc.delay.minutes": "", "sleeper.table.online": "false"}) == {
        "sleeper.table.online": "false"}
    update = validate_values({"sleeper.table.gc.delay.minutes": " ", "sleeper.table.online": "true"})
    assert apply_update({"sleeper.table.gc.delay.minutes": "30", "sleeper.table.compaction.runner": "spark"},
                        update) == {"sleeper.table.online": "true", "sleeper.table.compaction.runner": "spark"}


@pytest.mark.parametrize("given,suggested", [
    ("gc.delay.minutes", "sleeper.table.gc.delay.minutes"),
    ("sleeper.table.gc.delay.minute", "sleeper.table.gc.delay.minutes"),
    ("compaction.strategy", "sleeper.table.compaction.strategy"),
    ("sleeper.table.iterator.agregation", "sleeper.table.iterator.aggregation"),
])
def test_an_unknown_name_suggests_the_nearest_property(given, suggested):
    with pytest.raises(PropertyError, match=f"unknown table property '{given}'; did you mean {suggested}"):
        validate_values({given: "1"})


def test_non_string_values_are_converted_before_checking():
    assert validate_properties({"sleeper.table.online": False, "sleeper.table.gc.delay.minutes": 30}) == {
        "sleeper.table.online": "false", "sleeper.table.gc.delay.minutes": "30"}
    with pytest.raises(PropertyError):
        validate_properties({"sleeper.table.gc.delay.minutes": 2.5})


@pytest.mark.parametrize("text, size", [("1024", 1024), ("1K", 1024), ("2m", 2 * 1024**2), ("1G", 1024**3),
                                        ("3T", 3 * 1024**4), (" 7 ", 7)])
def test_sizes_are_bytes_with_binary_suffixes(text, size):
    assert parse_size(text) == size


def test_effective_properties_fill_in_defaults():
    eff = effective_properties({"sleeper.table.online": "false"})
    assert eff["sleeper.table.online"] == "false"
    assert eff["sleeper.table.gc.delay.minutes"] == "15"
    assert eff["sleeper.table.iterator.ageoff"] is None
    assert set(eff) == set(PROPERTY_DEFS)


def test_table_info_reads_set_properties_then_defaults():
    info = TableInfo("id1", "t", SCHEMA, {"sleeper.table.gc.delay.minutes": "30",
                                          "sleeper.table.ingest.batcher.job.min.size": "2K"})
    assert info.get("sleeper.table.gc.delay.minutes") == "30"
    assert info.get_int("sleeper.table.gc.delay.minutes") == 30
    assert info.get_int("sleeper.table.compaction.files.batch.size") == 12
    assert info.get_size("sleeper.table.ingest.batcher.job.min.size") == 2048
    assert info.get_size("sleeper.table.ingest.batcher.job.max.size") == 5 * 1024**3
    assert info.all_properties()["sleeper.table.gc.delay.minutes"] == "30"


def test_table_is_online_unless_set_offline():
    assert TableInfo("id1", "t", SCHEMA).online
    assert not TableInfo("id1", "t", SCHEMA, {"sleeper.table.online": "False"}).online


def test_the_orphan_grace_must_exceed_the_job_retry_time() -> None:
    with pytest.raises(PropertyError, match="must be longer than sleeper.table.compaction.job.retry.minutes=30"):
        validate_properties({"sleeper.table.gc.orphan.grace.minutes": "20"})
    with pytest.raises(PropertyError, match="longer than"):
        validate_properties({"sleeper.table.gc.orphan.grace.minutes": "30",
                             "sleeper.table.compaction.job.retry.minutes": "30"})
    assert validate_properties({"sleeper.table.gc.orphan.grace.minutes": "20",
                                "sleeper.table.compaction.job.retry.minutes": "5"})


def test_the_abandon_time_must_cover_the_orphan_grace() -> None:
    with pytest.raises(PropertyError, match="abandon.minutes=60 must be at least"):
        validate_properties({"sleeper.table.gc.orphan.grace.minutes": "90",
                             "sleeper.table.gc.job.abandon.minutes": "60"})


def test_each_property_is_one_constant_named_after_it():
    import statestore.properties as registry

    for name, prop in PROPERTY_DEFS.items():
        constant = name.removeprefix("sleeper.table.").upper().replace(".", "_")
        assert getattr(registry, constant) is prop, name
        assert prop == name and prop.name == name and isinstance(prop.values, str) and prop.values


def test_a_property_constant_pickles_as_its_plain_name():
    import pickle

    from statestore.properties import GC_DELAY_MINUTES

    assert type(pickle.loads(pickle.dumps(GC_DELAY_MINUTES))) is str
    assert pickle.loads(pickle.dumps({GC_DELAY_MINUTES: "5"})) == {"sleeper.table.gc.delay.minutes": "5"}


def test_former_second_names_of_properties_warn_and_give_the_constant():
    import statestore.properties as registry

    with pytest.warns(DeprecationWarning, match="use statestore.properties.GC_JOB_ABANDON_MINUTES"):
        assert registry.ABANDON is registry.GC_JOB_ABANDON_MINUTES
    with pytest.raises(AttributeError):
        registry.NO_SUCH_PROPERTY  # noqa: B018
