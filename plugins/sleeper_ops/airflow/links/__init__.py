"""Operator extra links: the table's status page."""
