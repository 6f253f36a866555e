"""Reading an ingest's Parquet input holds about one row group at a time, not the file:
a pyarrow reader over the whole file keeps the row groups it has read until it is
exhausted (apache/arrow#39808), so an ingest's memory grew with its input. Measured in a
new interpreter on Arrow's system pool, where every buffer of the reader is counted."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

CODE = """
import sys
import pyarrow as pa
import pyarrow.parquet as pq
from sleeper_ops.demo import SYSTEM_TEST_SCHEMA, generate_rows
from sleeper_ops.io.inputs import read_batches
from statestore.schema import Schema

path = sys.argv[1]
with pq.ParquetWriter(path, generate_rows(1, seed=0).schema) as w:
    for i in range(12):
        w.write_table(generate_rows(50_000, seed=i))
rows, peak = 0, 0
for b in read_batches(path, Schema.from_dict(SYSTEM_TEST_SCHEMA), batch_rows=10_000):
    rows += b.num_rows
    peak = max(peak, pa.total_allocated_bytes())
print(pa.default_memory_pool().backend_name, rows, peak)
"""


def test_reading_a_twelve_row_group_input_holds_well_under_half_the_file(tmp_path: Path) -> None:
    path = tmp_path / "input.parquet"
    env = {**os.environ, "ARROW_DEFAULT_MEMORY_POOL": "system"}
    p = subprocess.run([sys.executable, "-c", CODE, str(path)], env=env, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    pool, rows, peak = p.stdout.split()
    assert (pool, int(rows)) == ("system", 600_000)
    # one row group decoded is about 3.5 MB; the whole file (29 MB) was held before
    assert int(peak) < 0.5 * path.stat().st_size, f"peak {int(peak):,} bytes for a {path.stat().st_size:,}-byte file"
