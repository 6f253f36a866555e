"""Operators: one module per kind of work, each operator a thin class over the hook and the task runner."""
