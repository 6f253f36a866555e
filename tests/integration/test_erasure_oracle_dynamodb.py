"""The independent oracle of issue 33 on DynamoDB + S3 (moto): see
:mod:`tests.integration.test_erasure_oracle` for what it runs and checks. Each run tries
one random sequence (``SLEEPER_ORACLE_EXAMPLES``), the split-point sequence and one of the
known sequences drawn from the oracle's seed (``SLEEPER_ORACLE_KNOWN=all``: all five)."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any, Iterator

import pytest
from hypothesis import example, given, note, seed

from tests.faults.aws_proxy import FaultProxy
from tests.integration.statestore.conftest import MOTO_CREDENTIALS, moto_with_bucket
from tests.integration.test_erasure_oracle import _settings
from tests.oracle.plans import BUCKET, DYNAMO_COMMIT, EXAMPLES, KNOWN, SEED, SPLIT_POINT, Step, known_for_run, steps
from tests.oracle.raw_scan import DynamoPlace, Places, S3Place
from tests.oracle.sequences import Home, Tally, run_sequence
from tests.oracle.stores import CREDENTIALS

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def moto() -> Iterator[str]:
    with moto_with_bucket(BUCKET) as url:
        yield url


def test_the_oracle_on_dynamodb(moto: str, tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    tally = Tally()

    def oracle(plan: list[Step]) -> None:
        note(f"plan: {plan}")
        prefix = f"o{uuid.uuid4().hex[:10]}"
        root = tmp_path / prefix
        root.mkdir()
        spec = {"backend": "dynamodb", "endpoint": moto, "table_prefix": f"{prefix}-", "bucket": BUCKET,
                "prefix": prefix}
        creds = {"region": CREDENTIALS["region"], "access_key": MOTO_CREDENTIALS["access_key"],
                 "secret_key": MOTO_CREDENTIALS["secret_key"]}
        with FaultProxy(moto, seed=SEED) as proxy:
            rules: list[tuple[str, Any]] = []

            def arm(step: Step) -> None:
                if step.fault == "s3-lost":
                    rule = proxy.inject("lost", method="PUT", path="*", times=1)
                elif step.fault == "throttle":
                    rule = proxy.inject("throttle", operation="*", times=2)
                elif step.fault in ("outage", "outage-commit"):  # each applies, none answers, until it passes
                    rule = proxy.inject("error", operation="TransactWriteItems", times=None,
                                        body=DYNAMO_COMMIT if step.fault == "outage-commit" else None)
                elif step.fault == "throttle-commit":  # refused, none applied, until it passes
                    rule = proxy.inject("throttle", operation="TransactWriteItems", times=None, body=DYNAMO_COMMIT)
                elif step.fault == "lost-commit":
                    rule = proxy.inject("lost", operation="TransactWriteItems", body=DYNAMO_COMMIT)
                else:
                    rule = proxy.inject(step.fault or "lost", operation="TransactWriteItems",
                                        times=1 if step.fault == "lost" else 2)
                rules.append((f"ddb-{step.fault}", rule))

            def disarm() -> dict[str, int]:
                proxy.clear()
                fired = {label: r.fired for label, r in rules if r.fired}
                rules.clear()
                return fired

            home = Home("dynamodb", spec, Places(directories=[root], s3=[S3Place(BUCKET, f"{prefix}/", moto, **creds)],
                                                 dynamodb=[DynamoPlace(f"{prefix}-", moto, **creds)]),
                        root, arm, disarm, faulty_endpoint=proxy.url)
            run_sequence(home, plan, tally)

    try:
        for _, plan in [*known_for_run(KNOWN), ("split point", SPLIT_POINT)]:
            oracle = example(plan=plan)(oracle)
        seed(SEED)(_settings(EXAMPLES["dynamodb"])(given(plan=steps("dynamodb"))(oracle)))()
    finally:
        with capsys.disabled():
            print("\n" + tally.render("dynamodb"))
