"""The independent oracle of issue 33 (Deliver 7): Hypothesis runs random sequences of a
table's operations -- buffered write, ingest, bulk import (on Spark, PostgreSQL only: one a
run, or one a sequence with ``SLEEPER_ORACLE_SPARK=1``), delete (keys, a range, a range with
``where``), export, flush, compaction, split, GC, and a writer process killed with
SIGKILL (a buffered write, a standard ingest) -- with faults injected (DynamoDB, through
:class:`~tests.faults.aws_proxy.FaultProxy`: lost replies, 500s, throttling, and outages --
500s or throttling of every transaction until the client gives up -- and lost S3 replies;
PostgreSQL, through :class:`~tests.faults.commit_proxy.CommitDroppingProxy`: the connection
cut before or after COMMIT, or the server out of reach from then on), on PostgreSQL (the
embedded pool) and DynamoDB (moto, data and blobs in S3).

A plain-Python model, sharing no code with Sleeper, keeps every record by its unique key:
acknowledged, "maybe" (its write's outcome stayed unknown), deleted. A failed command is
retried as a user (or Airflow's task retry) would: with its request id where the product
takes one (buffered writes, deletes; ingest once it takes ``request_id``), as is
otherwise, once the fault has passed. A killed writer's command is sent again the same way
(unless it finished first). A definite refusal (the product's own error, not a lost store)
applied nothing; a command still failing after its fault passed is wedged.

At the end of each sequence, read through a fresh store without faults:

* every acknowledged record not deleted is there exactly once, a "maybe" one at most
  once, no deleted one is readable, and nothing the model never wrote is; no command
  was wedged;
* then the erasure report (``sleeper report erasure``) for the erased keys, asked at
  once and again after each piece of maintenance -- flush, compaction, GC (delays at
  their floors; judged 10 minutes ahead, inside the orphan grace, then days ahead), a
  DynamoDB snapshot, the owner removing each export
  file the report names -- until it says clean; and the first time it does,
  :func:`tests.oracle.raw_scan.raw_scan` -- every byte the home stores, decoded, written
  without the product's code -- finds none of the erased keys anywhere.

Size: ``SLEEPER_ORACLE_EXAMPLES`` random sequences (default 2 on PostgreSQL, 1 on DynamoDB,
to keep the suite's time; a session's measurement runs more, e.g. 25), after the known ones (:data:`KNOWN`), of up to
``SLEEPER_ORACLE_STEPS`` steps (default 12); the seed is printed and
``SLEEPER_ORACLE_SEED`` replays it (a failure also prints ``@reproduce_failure``, and its
plan); ``SLEEPER_ORACLE_SHRINK=0`` reports a failure unshrunk, ``SLEEPER_ORACLE_EXPLICIT=0``
leaves out the known sequences that run first (each reaching a finding of issue 33). The
size, the faults fired per kind and the raw scan's result are printed at the end.

This module runs the oracle on PostgreSQL; ``test_erasure_oracle_dynamodb.py`` on DynamoDB
(two modules, so a parallel run spreads them).
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, Phase, example, given, note, seed, settings

from tests.oracle.plans import (
    BULK_IMPORT,
    EXAMPLES,
    EXPLICIT,
    PG_KNOWN,
    PG_MARKER,
    SEED,
    SHRINK,
    SPLIT_POINT,
    Step,
    steps,
)
from tests.oracle.raw_scan import Places
from tests.oracle.sequences import Home, Tally, run_sequence

pytestmark = pytest.mark.integration


# ----- the tests ------------------------------------------------------------------------
def _settings(examples: int) -> settings:
    phases = [p for p in Phase
              if (SHRINK or p not in (Phase.shrink, Phase.explain)) and (EXPLICIT or p != Phase.explicit)]
    return settings(max_examples=examples, deadline=None, derandomize=False, database=None, print_blob=True,
                    suppress_health_check=list(HealthCheck), phases=phases)


def test_the_oracle_on_postgresql(pg_pool: Any, pg_admin_dsn: str, tmp_path: Path,
                                  capsys: pytest.CaptureFixture[str]) -> None:
    from psycopg.conninfo import make_conninfo

    from tests.faults.commit_proxy import CommitDroppingProxy

    tally = Tally()

    @seed(SEED)
    @_settings(EXAMPLES["postgres"])
    @given(plan=steps("postgres"))
    @example(plan=BULK_IMPORT)
    @example(plan=SPLIT_POINT)
    @example(plan=PG_KNOWN["orphan kept"])
    @example(plan=PG_KNOWN["ingest retried"])
    @example(plan=PG_KNOWN["export key reused"])
    def oracle(plan: list[Step]) -> None:
        note(f"plan: {plan}")
        db = pg_pool.take()
        dsn = make_conninfo(pg_admin_dsn, dbname=db)
        root = tmp_path / uuid.uuid4().hex[:8]
        proxy, faulty = CommitDroppingProxy.for_dsn(dsn)
        proxies = [proxy]
        drops = [0, ""]

        def arm(step: Step) -> None:
            marker = PG_MARKER.get(step.op.split("_")[0] if step.op.startswith("delete") else step.op,
                                   b"INSERT INTO file")
            drops[:] = [proxies[-1].drops, step.fault or ""]
            autocommit = step.op in ("write", "kill_write")  # a buffered write is one INSERT that commits itself
            proxies[-1].arm(after=step.fault in ("lost", "dark"), dark=step.fault in ("dark", "dark-before"),
                            marker=marker, commit=marker if autocommit else b"COMMIT")

        def disarm() -> dict[str, int]:
            """The fault passes: a server gone dark is reachable again, through a new proxy."""
            p = proxies[-1]
            p.disarm()
            fired = p.drops - int(drops[0])
            drops[0] = p.drops
            if fired and drops[1].startswith("dark"):
                fresh, home.faulty_dsn = CommitDroppingProxy.for_dsn(dsn)
                proxies.append(fresh)
                drops[0], home.reopen = 0, True
            return {f"pg-{drops[1]}": fired} if fired else {}

        home = Home("postgres", {"backend": "postgres", "dsn": dsn, "data": str(root / "data"), "spark": "local[2]"},
                    Places(directories=[root], postgres_dsn=dsn), root, arm, disarm, faulty_dsn=faulty)
        try:
            run_sequence(home, plan, tally)
        finally:
            for p in proxies:
                p.close()
            pg_pool.give_back(db)

    try:
        oracle()
    finally:
        with capsys.disabled():
            print("\n" + tally.render("postgres"))
