"""The Airflow processes that fork DAG parses and tasks import Sleeper's libraries once
(sleeper_ops.orchestration.warm_imports); the running check is in test_airflow_end_to_end.py."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from sleeper_ops.orchestration.warm_imports import LOCAL_SETTINGS, MODULES, forks_parses_or_tasks, write_local_settings


@pytest.mark.parametrize("argv,forks", [
    (["/venv/bin/airflow", "dag-processor"], True),
    (["/venv/bin/airflow", "scheduler"], True),
    (["/venv/bin/airflow", "celery", "worker", "--concurrency", "2"], True),
    (["/venv/bin/airflow", "api-server"], False),
    (["/venv/bin/airflow", "db", "migrate"], False),
    (["/venv/bin/airflow"], False),
    (["/venv/bin/sleeper", "scheduler"], False),
])
def test_only_the_programs_that_fork_parses_or_tasks_are_warmed(argv: list[str], forks: bool) -> None:
    assert forks_parses_or_tasks(argv) is forks


def test_warming_a_dag_processor_imports_the_libraries_and_nothing_of_airflow() -> None:
    code = ("import sys\nfrom sleeper_ops.orchestration.warm_imports import warm\n"
            "print(warm(['/v/bin/airflow', 'api-server']))\n"
            "print(warm(['/v/bin/airflow', 'dag-processor']))\n"
            f"print(all(m in sys.modules for m in {MODULES!r}), "
            "[m for m in sys.modules if m.split('.')[0] == 'airflow'])")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    assert p.stdout.splitlines() == ["[]", str(list(MODULES)), "True []"]


def test_the_settings_file_is_written_and_rewritten_but_a_users_own_is_kept(tmp_path: Path) -> None:
    path = tmp_path / "config" / "airflow_local_settings.py"
    assert write_local_settings(tmp_path) and path.read_text() == LOCAL_SETTINGS
    path.write_text(LOCAL_SETTINGS + "# an older copy of ours\n")
    assert write_local_settings(tmp_path) and path.read_text() == LOCAL_SETTINGS
    path.write_text("def task_policy(task):\n    pass\n")
    assert not write_local_settings(tmp_path)
    assert path.read_text() == "def task_policy(task):\n    pass\n"


def test_the_settings_file_the_previous_release_wrote_is_rewritten_as_ours(tmp_path: Path) -> None:
    # Given the file a home made by the previous release holds (its first line named the old module)
    path = tmp_path / "config" / "airflow_local_settings.py"
    path.parent.mkdir()
    path.write_text("# Written by sleeper (sleeper_ops.airflow.warm_imports); rewritten on each start.\n"
                    "from sleeper_ops.airflow.warm_imports import warm\n\nwarm()\n")
    # When Airflow starts again, Then the file is ours and is rewritten
    assert write_local_settings(tmp_path) and path.read_text() == LOCAL_SETTINGS


def test_the_aws_models_are_loaded_once_and_a_later_client_resolves_its_own_credentials() -> None:
    """After warming, a client of S3 or DynamoDB (as the state store and the blob store
    make them) reads no model file again, and one made without keys takes the credentials
    the environment names by then, not anything fixed at warming."""
    code = """
import os, sys
import botocore.loaders
from sleeper_ops.orchestration.warm_imports import warm
from statestore.dynamodb.connection import CLIENT_SERVICES
print(warm(['/v/bin/airflow', 'celery', 'worker']) != [])
reads = []
original = botocore.loaders.JSONFileLoader.load_file
def counted(self, path):
    reads.append(path)
    return original(self, path)
botocore.loaders.JSONFileLoader.load_file = counted
import boto3
from botocore.config import Config
for service in CLIENT_SERVICES:
    boto3.client(service, endpoint_url='http://127.0.0.1:9', region_name='eu-west-2', aws_access_key_id='k',
                 aws_secret_access_key='s', config=Config(retries={'max_attempts': 4, 'mode': 'standard'}))
print(sorted(CLIENT_SERVICES), [r for r in reads if '/s3/' in r or '/dynamodb/' in r])
os.environ.update(AWS_ACCESS_KEY_ID='later-key', AWS_SECRET_ACCESS_KEY='later-secret')
print(boto3.client('s3', region_name='eu-west-2')._request_signer._credentials.access_key)
"""
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env)
    assert p.returncode == 0, p.stderr
    assert p.stdout.splitlines() == ["True", "['dynamodb', 's3'] []", "later-key"]
    assert "and the models of 2 AWS services" in p.stderr
