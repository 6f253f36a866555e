"""Compaction: strategies (pure planning), job creation, execution of one job, the runners."""
