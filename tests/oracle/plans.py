"""The plans of the erasure oracle (tests/integration/test_erasure_oracle.py): the size
and seed of a run (environment variables), the steps a sequence is made of, the known
sequences each reaching a finding of issue 33, Hypothesis's strategy of random ones, and
the plain-Python model of the records (it shares no code with Sleeper)."""

from __future__ import annotations

import dataclasses
import os
import random
import sys
import uuid
from typing import Optional

from hypothesis import strategies as st

#: random sequences a backend (besides the known ones): PostgreSQL's steps take a fraction of DynamoDB's (moto)
EXAMPLES = {b: int(os.environ.get("SLEEPER_ORACLE_EXAMPLES", n)) for b, n in (("postgres", "2"), ("dynamodb", "1"))}
STEPS = int(os.environ.get("SLEEPER_ORACLE_STEPS", "12"))
SEED = int(os.environ.get("SLEEPER_ORACLE_SEED") or random.randrange(1 << 32))
#: "0": report the first failing sequence as found, without shrinking it (minutes of runs)
SHRINK = os.environ.get("SLEEPER_ORACLE_SHRINK", "1") != "0"
#: "0": random sequences only, without the known ones (:data:`KNOWN`) first
EXPLICIT = os.environ.get("SLEEPER_ORACLE_EXPLICIT", "1") != "0"
#: "all": every known sequence on DynamoDB in every run; by default one a run, drawn from
#: :data:`SEED` (a DynamoDB sequence is tens of seconds on moto; each known one also has a
#: test of its own finding), so successive runs go round them
ALL_KNOWN = os.environ.get("SLEEPER_ORACLE_KNOWN") == "all"
BUCKET = "sleeper-erasure-oracle"
SCHEMA = {"rowKeyFields": [{"name": "key", "type": "StringType"}],
          "valueFields": [{"name": "v", "type": "StringType"}, {"name": "payload", "type": "StringType"}]}
#: compaction purges every delete at once; GC judged :data:`SOON` ahead deletes replaced files (GC delay and
#: history retention passed) but no orphan (its grace not passed: the window where the report must list them);
#: judged days ahead, it removes all it may
PROPERTIES = {"sleeper.table.delete.purge.hours": "0", "sleeper.table.gc.delay.minutes": "1",
              "sleeper.table.history.retention.minutes": "5", "sleeper.table.gc.orphan.grace.minutes": "60",
              "sleeper.table.compaction.job.retry.minutes": "1", "sleeper.table.partition.splitting.threshold": "40"}
SOON = 10 * 60 * 1000
DAY_MS = 24 * 3600 * 1000
#: a buffered write this big keeps its bytes in the blob store on DynamoDB (over 350 KB)
BIG_ROWS, BIG_PAYLOAD = 2000, 200
#: faults a step may carry, per backend
FAULTS = {"postgres": ["lost", "cut", "dark", "dark-before"],
          "dynamodb": ["lost", "error", "throttle", "s3-lost", "outage", "lost-commit", "outage-commit",
                       "throttle-commit"]}
#: DynamoDB: the request body of a commit (a transaction naming the log table)
DYNAMO_COMMIT = b'-log"'
#: PostgreSQL: what a step's commit sends before COMMIT (the commit proxy's marker)
PG_MARKER = {"write": b"INSERT INTO write_buffer", "kill_write": b"INSERT INTO write_buffer",
             "delete": b"INSERT INTO table_deletes", "split": b"INSERT INTO partitions", "gc": b"DELETE FROM files"}

print(f"erasure oracle: seed {SEED} (SLEEPER_ORACLE_SEED={SEED} replays it)", file=sys.stderr)



# ----- steps: pure data, so Hypothesis shrinks and replays them ---------------------------
@dataclasses.dataclass(frozen=True)
class Step:
    op: str
    n: int = 0  # records (write, ingest, kill) / first key index (deletes)
    width: int = 0  # keys in a range delete / ms before the kill
    value: str = "a"  # the records' v / the where-delete's v
    big: bool = False
    export_key: Optional[str] = None
    fault: Optional[str] = None


#: sequences every run tries first, each reaching a finding of issue 33 in a few steps
KNOWN: dict[str, list[Step]] = {
    # 5: an export key reused for a second destination writes a copy the report never lists
    "export key reused": [Step("ingest", 6), Step("export", export_key="daily"), Step("export", export_key="daily"),
                          Step("delete_range", 0, 6)],
    # 7: a standard ingest whose outcome is unknown, retried (as Airflow does): every record twice
    "ingest retried": [Step("ingest", 5, fault="outage-commit")],  # (PostgreSQL: "dark")
    # 3: a flush's reply lost: the retry finds it applied and leaves the buffered records' blob
    "flush reply lost": [Step("write", 1, big=True), Step("flush", fault="lost-commit"),
                         Step("delete_range", 0, 5000)],
    # 2: a delete of ~4,400 keys: its log summary is over DynamoDB's item size
    "large delete": [Step("ingest", 5), Step("delete_many", 0, 5), Step("write", 3)],
    # 4: a compaction's commit of unknown outcome (not applied): its output, kept for the orphan sweep, holds
    # records erased next, and the report does not look at untracked objects (PostgreSQL: "dark-before")
    "orphan kept": [Step("ingest", 4), Step("delete_keys", 0, 1), Step("compact", fault="throttle-commit"),
                    Step("delete_range", 1, 3), Step("compact")],
}
#: one bulk import on Spark (slow: one a run, unless SLEEPER_ORACLE_SPARK=1 lets random sequences have one too)
BULK_IMPORT = [Step("bulk_import", 20), Step("ingest", 3), Step("delete_range", 5, 10), Step("compact")]
SPARK = os.environ.get("SLEEPER_ORACLE_SPARK", "0") == "1"
#: not named by issue 33: a split point is a record's key, kept in the partition tree after the record is erased
SPLIT_POINT = [Step("ingest", 60), Step("split"), Step("delete_range", 0, 1000)]
PG_KNOWN = {"ingest retried": [Step("ingest", 5, fault="dark")],
            "orphan kept": [dataclasses.replace(x, fault="dark-before") if x.fault else x
                            for x in KNOWN["orphan kept"]],
            "export key reused": KNOWN["export key reused"]}
#: keys a large delete names that no record has
PAD_KEYS = [f"{uuid.UUID(int=i * 7919 + 12345)}" for i in range(4400)]


def steps(backend: str) -> st.SearchStrategy[list[Step]]:
    fault = st.one_of(st.none(), st.none(), st.sampled_from(FAULTS[backend]))
    vs = st.sampled_from(["a", "b"])
    one = st.one_of(
        st.builds(Step, st.just("write"), st.integers(1, 20), st.just(0), vs, st.sampled_from([False, False, True]),
                  st.none(), fault),
        st.builds(Step, st.just("ingest"), st.integers(1, 20), st.just(0), vs, st.just(False), st.none(), fault),
        st.builds(Step, st.just("delete_keys"), st.integers(0, 400), st.integers(1, 3), vs, st.just(False),
                  st.none(), fault),
        st.builds(Step, st.just("delete_range"), st.integers(0, 400), st.integers(1, 12), vs, st.just(False),
                  st.none(), fault),
        st.builds(Step, st.just("delete_where"), st.integers(0, 400), st.integers(1, 20), vs, st.just(False),
                  st.none(), fault),
        st.builds(Step, st.just("export"), export_key=st.sampled_from([None, "daily"]), fault=fault),
        st.builds(Step, st.sampled_from(["flush", "compact", "split", "gc"]), fault=fault),
        st.builds(Step, st.sampled_from(["kill_write", "kill_ingest"]), st.integers(1, 20), st.integers(300, 4000),
                  vs),
    )
    if SPARK and backend == "postgres":
        bulk = st.builds(Step, st.just("bulk_import"), st.integers(1, 20), fault=fault)
        return st.tuples(st.lists(one, min_size=1, max_size=STEPS - 1), bulk, st.integers(0, STEPS)).map(
            lambda t: [*t[0][:t[2]], t[1], *t[0][t[2]:]])
    return st.lists(one, min_size=2, max_size=STEPS)


# ----- the model ------------------------------------------------------------------------
@dataclasses.dataclass
class Model:
    """Records by their unique key: their v; where each one stands."""

    values: dict[str, str] = dataclasses.field(default_factory=dict)  # every key ever written
    acked: set[str] = dataclasses.field(default_factory=set)
    maybe: set[str] = dataclasses.field(default_factory=set)  # outcome unknown: there at most once
    deleted: set[str] = dataclasses.field(default_factory=set)  # an acknowledged delete covered it
    maybe_deleted: set[str] = dataclasses.field(default_factory=set)  # a delete of unknown outcome did

    def live(self) -> list[str]:
        return sorted(k for k in self.values if k not in self.deleted)

    def covered(self, lo: str, hi: Optional[str], only: Optional[str]) -> set[str]:
        return {k for k in self.live()
                if lo <= k and (hi is None or k < hi) and (only is None or self.values[k] == only)}

    def apply_delete(self, keys: set[str], applied: bool) -> None:
        """A delete of ``keys``: an acknowledged record it covered is gone for good once
        the delete is acknowledged; a "maybe" one may yet be committed after it (a
        pending group commit), so it stays there at most once, as does any record the
        delete of unknown outcome covered."""
        for k in keys:
            sure = applied and k in self.acked
            self.acked.discard(k)
            self.maybe.discard(k)
            (self.deleted if sure else self.maybe_deleted).add(k)



def known_for_run(known: dict[str, list[Step]]) -> list[tuple[str, list[Step]]]:
    """The known sequences this run tries: all with ``SLEEPER_ORACLE_KNOWN=all``, else one
    drawn from :data:`SEED` (printed, so a run replays with its seed)."""
    names = sorted(known)
    chosen = names if ALL_KNOWN else [random.Random(SEED).choice(names)]
    print(f"erasure oracle: known sequences this run: {', '.join(chosen)}", file=sys.stderr)
    return [(n, known[n]) for n in chosen]
