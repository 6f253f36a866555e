"""Getting records in: standard ingest (sorted files, one per leaf) and the ingest batcher."""
