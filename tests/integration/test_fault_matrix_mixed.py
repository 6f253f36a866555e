"""The fault matrix's random rows: a mixed workload (buffered writes, ingests, flushes,
compaction, split, GC) on DynamoDB with every DynamoDB write and every S3 request of
the table's data and of the state store's blobs (snapshots, large bodies, buffer
blobs) failing at random, 15 % each, for each fault kind.

Each run is seeded, and each fault rule draws from an RNG of its own seeded from the
run's seed (so one rule's draws do not depend on other threads' traffic): the seeds
are ``SLEEPER_FAULT_SEEDS`` (default ``1,2,3``), printed in every failure, and a failing
run replays with ``SLEEPER_FAULT_SEEDS=<seed>``. A write or ingest that fails is sent
again with its request id (up to :data:`TRIES` times) where the command takes one; each
run's first commit and first object write fail for certain, so each run asserts that
faults of its kind fired on both DynamoDB and S3; it ends with the same exact checks as
the rest of the matrix.
"""

from __future__ import annotations

import os
import time
import uuid
from typing import Any, Callable

import pytest

from tests.integration import test_fault_matrix as matrix_module
from tests.integration.statestore.conftest import MOTO_CREDENTIALS
from tests.integration.test_fault_matrix import (
    AWS_FAULTS,
    BUCKET,
    DAYS_AHEAD_MS,
    PROPERTIES,
    SCHEMA,
    Cell,
    Run,
    Stack,
    _keys,
    _records,
    _s3,
    check,
)

pytestmark = pytest.mark.integration

# the matrix module's fixtures: one moto server and fault proxy for this module, its own table printed at the end
moto, proxy, dynamo_prefix, matrix = (matrix_module.moto, matrix_module.proxy, matrix_module.dynamo_prefix,
                                      matrix_module.matrix)

SEEDS = [int(x) for x in os.environ.get("SLEEPER_FAULT_SEEDS", "1,2,3").split(",") if x.strip()]
WRITE_OPERATIONS = ("TransactWriteItems", "PutItem", "UpdateItem", "DeleteItem", "BatchWriteItem")
#: how many times a failed write is sent, in all, with its request id
TRIES = 4
#: rounds of the workload a run (SLEEPER_FAULT_ROUNDS: more for a longer run)
ROUNDS = int(os.environ.get("SLEEPER_FAULT_ROUNDS", "1"))


def _send_until_acknowledged(run: Run, keys: list[str], step: Callable[[str], Any]) -> None:
    """Send ``step`` with a request id of its own, again with the same id while it fails
    (a client after a lost reply or a 5xx), :data:`TRIES` times at most; acknowledged,
    its records count once; never acknowledged, wholly there or not at all."""
    request_id = f"req-{uuid.uuid4().hex}"
    for attempt in range(TRIES):
        try:
            step(request_id)
        except Exception:
            if attempt == TRIES - 1:
                run.failed.append(set(keys))
                return
            run.retried += 1
            continue
        run.acked.update(keys)
        return


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("fault", AWS_FAULTS)
def test_random_faults_on_every_dynamodb_write_lose_and_double_nothing(fault, seed, moto, proxy, dynamo_prefix,
                                                                       matrix):
    from sleeper_ops.api import Sleeper
    from sleeper_ops.io.storage import ObjectStore
    from statestore.dynamodb import open_dynamodb

    root = f"s3://{BUCKET}/mixed-{uuid.uuid4().hex[:8]}"
    blobs = f"s3://{BUCKET}/_statestore-mixed-{uuid.uuid4().hex[:8]}"

    def dynamo(url: str) -> Any:
        return open_dynamodb(endpoint_url=url, table_prefix=dynamo_prefix, object_store=blobs,
                             object_store_options={"endpoint_url": url, **MOTO_CREDENTIALS},
                             retention_margin=0, snapshot_every=5, **MOTO_CREDENTIALS)

    stack = Stack("dynamodb", lambda: Sleeper(state_store=dynamo(proxy.url), objects=ObjectStore(root, _s3(proxy.url))),
                  lambda: Sleeper(state_store=dynamo(moto), objects=ObjectStore(root, _s3(moto))),
                  lambda path, fault: None, dict)
    name = f"mixed-{uuid.uuid4().hex[:6]}"
    run = Run(name)
    with stack.open_fresh() as s:
        s.create_table(name, SCHEMA, ["m"], {**PROPERTIES, "sleeper.table.partition.splitting.threshold": "150"})
    replay = (f"seed {seed} (replay: SLEEPER_FAULT_SEEDS={seed} pytest tests/integration/test_fault_matrix_mixed.py "
              f"-k '{fault}-{seed}')")
    # the first commit and the first object write always fail, so no run goes by without both kinds
    state_rules = [proxy.inject(fault, operation="TransactWriteItems", times=1)]
    state_rules += [proxy.inject(fault, operation=op, times=None, probability=0.15, seed=f"{fault}-{seed}-{op}")
                    for op in WRITE_OPERATIONS]
    s3_rules = [proxy.inject(fault, method="PUT", path="*", times=1),
                proxy.inject(fault, method="PUT", path="*", times=None, probability=0.15, seed=f"{fault}-{seed}-s3")]
    now = int(time.time() * 1000)
    try:
        with stack.open_faulty() as s:
            table = s.table(name)
            for round_no in range(ROUNDS):
                for i in range(3):
                    keys = _keys(f"w{round_no}{i}", 40)
                    _send_until_acknowledged(run, keys, lambda rid, k=keys: table.write(_records(k), request_id=rid))
                keys = _keys(f"i{round_no}", 60)
                _send_until_acknowledged(run, keys, lambda rid, k=keys: table.ingest(_records(k), request_id=rid))
                for step in (table.flush, lambda: table.compact("local"), table.split,
                             lambda: table.gc(now_ms=now + DAYS_AHEAD_MS)):
                    try:
                        step()
                    except Exception:
                        run.failed.append(set())  # maintenance: run again next round
    finally:
        proxy.clear()
    cell = matrix.cells.setdefault(("mixed", "dynamodb", fault), Cell())
    cell.runs += 1
    cell.state_faults += sum(r.fired for r in state_rules)
    cell.s3_faults += sum(r.fired for r in s3_rules)
    cell.failed += len(run.failed)
    cell.retried += run.retried
    check(stack, run, cell)
    assert (cell.lost, cell.doubled, cell.wedged, cell.orphans) == (0, 0, 0, 0), f"{replay}\n{matrix.table()}"
    assert sum(r.fired for r in state_rules) > 0, f"no DynamoDB {fault} fault fired: {replay}"
    assert sum(r.fired for r in s3_rules) > 0, f"no S3 {fault} fault fired: {replay}"
