"""Arrow-native record processing: the sort-preserving merge, leaf assignment, iterators."""
