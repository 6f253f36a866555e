"""Hooks: :class:`~sleeper_ops.airflow.hooks.sleeper.SleeperHook` opens Sleeper from a ``sleeper`` connection."""
