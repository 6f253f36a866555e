"""Triggers: what the triggerer polls while a sensor or a deferrable operator waits."""
