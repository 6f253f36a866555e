"""How standard ingest writes its sorted chunks: the only chunk straight to its data
files, or every chunk spilled as sorted runs per leaf that are then merged.

Every step runs on ``threads`` threads and, when any item fails, deletes what the
others wrote before raising (nothing is committed by then). See
:mod:`sleeper_ops.ingest.standard` for the ingest around it.
"""

from __future__ import annotations

import functools
import os
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Callable, Optional, Sequence, TypeVar

import numpy as np
import pyarrow as pa

from sleeper_ops.engine.key_order import sorted_by_leaf, sorted_leaf_slices
from sleeper_ops.engine.leaves import leaf_indices_sliced, sorted_rows
from sleeper_ops.engine.merge import merge_sorted
from sleeper_ops.ingest.attempt import IngestAttempt
from sleeper_ops.ingest.shared_files import IngestOutput, leaf_groups, take_group, write_group
from sleeper_ops.io.datafile import ParquetSettings, sketch_key, write_data_file
from sleeper_ops.io.storage import ObjectStore
from statestore.partitions import Partition, PartitionTree
from statestore.schema import Schema

_T = TypeVar("_T")
_I = TypeVar("_I")
#: a chunk's :func:`sorted_leaf_slices` answer: the sorted order and each leaf's slice of it
Slices = tuple[np.ndarray, list[tuple[Partition, int, int]]]


class ChunkWriter:
    """Writes one ingest's sorted chunks as data files of ``schema`` into ``objects``."""

    def __init__(self, objects: ObjectStore, schema: Schema, settings: ParquetSettings, threads: int) -> None:
        self.objects, self.schema, self.settings, self.threads = objects, schema, settings, threads

    def by_leaf(self, chunk: list[pa.RecordBatch],
                 tree: PartitionTree) -> list[tuple[Partition, Callable[[], pa.Table]]]:
        """Split an unsorted chunk by leaf partition; each item gives its leaf's rows in
        key order when called. The chunk is sorted on its first row key's prefix numbers
        here and each item takes its slice (:mod:`sleeper_ops.engine.key_order`), or, where
        that does not apply, :meth:`by_leaf_sorting`."""
        table = pa.Table.from_batches(chunk).combine_chunks()
        fast = sorted_by_leaf(table, tree, self.schema)
        return fast if fast is not None else self.by_leaf_sorting(table, tree)

    def by_leaf_sorting(self, table: pa.Table,
                         tree: PartitionTree) -> list[tuple[Partition, Callable[[], pa.Table]]]:
        """``table`` split by row slices in parallel; each item sorts its leaf's rows."""
        with ThreadPoolExecutor(self.threads) as pool:
            leaves = leaf_indices_sliced(table, tree, self.threads, pool.map)
        return [(leaf, functools.partial(sorted_rows, table, idx, self.schema)) for leaf, idx in leaves]

    def parallel(self, fn: Callable[[_I], _T], items: Sequence[_I],
                  meanwhile: Optional[Callable[[], None]] = None) -> list[_T]:
        """Run ``fn`` over items in the thread pool; every item runs even if one fails.
        ``meanwhile`` runs in this thread once the items are submitted."""
        with ThreadPoolExecutor(self.threads) as pool:
            futures = [pool.submit(fn, item) for item in items]
            if meanwhile is not None:
                meanwhile()
        results, errors = [], []
        for f in futures:
            try:
                results.append(f.result())
            except BaseException as e:
                errors.append(e)
        if errors:
            self.cleanup([r for r in results if isinstance(r, IngestOutput)])
            raise errors[0]
        return results

    def cleanup(self, written: list[IngestOutput]) -> None:
        for out in written:
            self.objects.delete(out.file.key)
            self.objects.delete(sketch_key(out.file.key))

    def write_direct(self, chunk: list[pa.RecordBatch], tree: PartitionTree,
                      attempt: IngestAttempt) -> list[IngestOutput]:
        """Sort and write the only chunk: as at most ``threads`` files shared by the leaves
        they span (:mod:`sleeper_ops.ingest.shared_files`) when the chunk sorts on its
        prefix numbers, else one file per leaf. The taking (or sorting) of the rows
        overlaps the saving of the job record that names the outputs, and each write
        waits for it."""
        table = pa.Table.from_batches(chunk).combine_chunks()
        return self.write_sorted(table, sorted_leaf_slices(table, tree, self.schema), tree, attempt)

    def write_sorted(self, table: pa.Table, fast: Optional[Slices],
                      tree: PartitionTree, attempt: IngestAttempt) -> list[IngestOutput]:
        """:meth:`write_direct` of ``table`` with its :func:`sorted_leaf_slices` answer ``fast``."""
        if fast is None:
            items = self.by_leaf_sorting(table, tree)
            firsts = [leaf.id for leaf, _ in items]  # each file's (first) leaf, which its key names
        else:
            order, slices = fast
            groups = leaf_groups(slices, self.threads)
            firsts = [g[0].leaf.id for g in groups]
        named: Future[list[str]] = Future()

        def name() -> None:
            try:
                named.set_result(attempt.new_keys(firsts))
            except BaseException as e:
                named.set_exception(e)  # every write raises it; parallel raises it here

        def write(i: int) -> IngestOutput:
            if fast is None:
                leaf, rows = items[i]
                data = rows()
                return IngestOutput.of_leaf(leaf.id, write_data_file(self.objects, named.result()[i], self.schema,
                                                                     data, self.settings))
            data = take_group(table, order, groups[i])
            return IngestOutput.of_group(write_group(self.objects, named.result()[i], self.schema, self.settings,
                                                     data, groups[i]), groups[i])
        return self.parallel(write, range(len(firsts)), meanwhile=name)

    def spill(self, chunk: list[pa.RecordBatch], tree: PartitionTree, root: str, chunk_no: int,
               runs: dict[str, list[str]]) -> None:
        def spill(item: tuple[Partition, Callable[[], pa.Table]]) -> tuple[str, str]:
            leaf, rows = item
            d = os.path.join(root, leaf.id)
            os.makedirs(d, exist_ok=True)
            # an uncompressed Arrow IPC run, as bulk import's: faster to write and read than a
            # Parquet one, and the merge of Parquet runs held memory growing with their size
            # (peak RSS 1.10/1.16/1.43 GB at 5/10/20 M rows, against 1.10/1.12/1.10 GB)
            path = os.path.join(d, f"run-{chunk_no:06d}.arrow")
            data = rows()
            with pa.ipc.new_file(path, data.schema) as w:
                w.write_table(data, max_chunksize=65_536)
            return leaf.id, path
        for leaf_id, path in self.parallel(spill, self.by_leaf(chunk, tree)):
            runs.setdefault(leaf_id, []).append(path)

    def merge_runs(self, runs: dict[str, list[str]], attempt: IngestAttempt) -> list[IngestOutput]:
        """Merge each leaf's spilled runs into its data file, leaves in parallel."""
        keys = attempt.new_keys(list(runs))

        def merge(item: tuple[tuple[str, list[str]], str]) -> IngestOutput:
            (leaf_id, paths), key = item
            return IngestOutput.of_leaf(leaf_id, write_data_file(self.objects, key, self.schema,
                                                                 merge_sorted(paths, self.schema), self.settings))
        return self.parallel(merge, list(zip(runs.items(), keys)))
