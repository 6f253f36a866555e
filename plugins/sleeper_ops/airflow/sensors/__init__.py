"""Sensors: wait for data to be visible, or for a dated bulk import's input."""
