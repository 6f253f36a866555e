"""Which Sleeper a SleeperHook opens: a connection id that does not exist is refused in
one line naming it; only the default id, ``sleeper_default``, falls back to
``SLEEPER_HOME`` when Airflow has no such connection, so a typo in ``sleeper_conn_id``
never writes to the local store."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("airflow")

from airflow.sdk.exceptions import AirflowFailException

from sleeper_ops.airflow.hooks.sleeper import SleeperHook
from sleeper_ops.airflow.operators.maintenance import SleeperSplitOperator


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    (tmp_path / "sleeper.toml").write_text('[state_store]\nbackend = "memory"\n')
    monkeypatch.setenv("SLEEPER_HOME", str(tmp_path))
    monkeypatch.delenv("AIRFLOW_CONN_SLEEPER_DEFAULT", raising=False)
    monkeypatch.delenv("AIRFLOW_CONN_SLEEPER_PRDO", raising=False)
    return tmp_path


def test_a_connection_id_that_does_not_exist_is_refused_in_one_line_naming_it(home: Path) -> None:
    with pytest.raises(AirflowFailException, match=r"^no Airflow connection 'sleeper_prdo'") as e:
        SleeperHook("sleeper_prdo").get_config()
    assert "\n" not in str(e.value) and "SLEEPER_HOME" in str(e.value)
    with pytest.raises(AirflowFailException, match="'sleeper_prdo'"):
        SleeperHook("sleeper_prdo").get_conn()


def test_an_operator_with_a_misspelt_connection_fails_rather_than_using_sleeper_home(home: Path) -> None:
    op = SleeperSplitOperator(task_id="split", table="events", sleeper_conn_id="sleeper_prdo")
    with pytest.raises(AirflowFailException, match="'sleeper_prdo'"):
        op.hook.get_conn()


def test_the_default_connection_absent_falls_back_to_sleeper_home(home: Path) -> None:
    assert SleeperHook().get_config().home == home
    assert SleeperHook(SleeperHook.default_conn_name).get_config().home == home
    assert SleeperSplitOperator(task_id="split", table="events").hook.get_config().home == home


def test_a_connection_that_exists_is_used_whatever_its_id(home: Path, tmp_path_factory: pytest.TempPathFactory,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    other = tmp_path_factory.mktemp("prod")
    monkeypatch.setenv("AIRFLOW_CONN_SLEEPER_PRDO", json.dumps(
        {"conn_type": "sleeper", "extra": {"home": str(other), "object_store_uri": str(other / "data")}}))
    assert SleeperHook("sleeper_prdo").get_config().object_store_uri == str(other / "data")
