"""User iterators named by ``sleeper.table.iterator.python`` in the iterator tests.

The tests put this directory on ``sys.path`` so ``iterator_samples:NAME`` imports.
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc


def times_ten(batch: pa.RecordBatch) -> pa.RecordBatch:
    """Multiply the ``count`` field by ten."""
    i = batch.schema.get_field_index("count")
    return batch.set_column(i, batch.schema.field(i), pc.multiply(batch.column(i), 10))


def drop_odd_counts(batch: pa.RecordBatch) -> pa.RecordBatch:
    """Keep records whose ``count`` is even."""
    return batch.filter(pc.equal(pc.bit_wise_and(batch.column("count"), 1), 0))


def drop_all(batch: pa.RecordBatch) -> None:
    return None


def wrong_schema(batch: pa.RecordBatch) -> pa.RecordBatch:
    """Drops a column: breaks the iterator contract."""
    return batch.drop_columns([batch.schema.names[-1]])


NOT_CALLABLE = 42
