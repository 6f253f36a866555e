"""Storage and formats: the object store, data files (Parquet + sketches), the Arrow
schema, input readers, output writers and the JSON codec of keys and records."""
