"""Assets: the ``sleeper://`` URI (its handler and OpenLineage conversion) and the events a commit adds."""
