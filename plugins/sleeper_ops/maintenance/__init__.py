"""Table upkeep besides compaction: partition splitting, garbage collection, operation leases."""
