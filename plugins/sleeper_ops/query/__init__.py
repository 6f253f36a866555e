"""Reading records back: the query runner (exact keys, ranges, query-time iterators)."""
