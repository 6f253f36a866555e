"""The templated properties of a table's dated DAGs, checked when they are set.

``sleeper.table.bulk.import.source`` and ``sleeper.table.export.destination`` are Jinja
templates that Airflow renders on each run's data interval (they are template fields of
the dated DAGs' operators). :func:`check_templates` renders them when a property is set,
as Airflow would, on a sample interval: the last whole day before now, in UTC. A template
that does not render is refused with one line naming the table, the property and Jinja's
message, so it never fails a run (three tries) instead.

Rendered as Airflow renders a template field: a sandboxed Jinja environment with
``StrictUndefined`` (the DAG default: an unknown name is an error), the ``jinja2.ext.do``
extension and Airflow's filters (``ds``, ``ds_nodash``, ``ts``, ``ts_nodash``,
``ts_nodash_with_tz``), and a run's context: the interval's dates as ``pendulum``
date-times (``data_interval_start``, ``data_interval_end``, ``logical_date``, the
``prev_*`` ones) and the strings made from them (``ds``, ``ts``, ...), ``run_id``,
``params`` (empty: the dated DAGs declare none). What only a real run has (``var``,
``conn``, ``ti``, ``task``, ``dag``, ``dag_run``, asset events) renders as a sample
value that takes any attribute, item or call; ``macros`` is Airflow's own module when
Airflow is installed. A template that renders to nothing is refused too.
"""

from __future__ import annotations

import datetime
from typing import Any, Mapping, Optional

from sleeper_ops.errors import ConfigError
from statestore.properties import BULK_IMPORT_SOURCE, EXPORT_DESTINATION

#: the properties Airflow renders as templates on a run's data interval
TEMPLATE_PROPERTIES = (BULK_IMPORT_SOURCE, EXPORT_DESTINATION)
#: context entries only a real run has: rendered as :class:`_Sample`
_RUN_ONLY = ("var", "conn", "ti", "task_instance", "task", "dag", "dag_run", "inlets", "outlets", "inlet_events",
             "outlet_events", "triggering_asset_events", "templates_dict", "task_state_store", "asset_state_store",
             "map_index_template", "exception", "reason")


class _Sample:
    """A value only a real run knows: any attribute, item or call gives another sample."""

    def __getattr__(self, name: str) -> _Sample:
        if name.startswith("__"):
            raise AttributeError(name)
        return self

    def __getitem__(self, key: Any) -> _Sample:
        return self

    def __call__(self, *args: Any, **kwargs: Any) -> _Sample:
        return self

    def __iter__(self) -> Any:
        return iter(())

    def __str__(self) -> str:
        return "sample"


class _Macros:
    """Airflow's ``macros`` (``airflow.sdk.execution_time.macros``), imported on first use."""

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        try:
            import importlib

            module = importlib.import_module("airflow.sdk.execution_time.macros")
        except ImportError as e:
            raise ConfigError(f"the template uses macros.{name}: checking it needs Airflow installed ({e})") from e
        return getattr(module, name)


def _filters() -> dict[str, Any]:
    """Airflow's template filters, as ``airflow.sdk`` defines them."""
    def ds(v: Any) -> Optional[str]:
        return None if v is None else v.strftime("%Y-%m-%d")

    def ds_nodash(v: Any) -> Optional[str]:
        return None if v is None else v.strftime("%Y%m%d")

    def ts(v: Any) -> Optional[str]:
        return None if v is None else v.isoformat()

    def ts_nodash(v: Any) -> Optional[str]:
        return None if v is None else v.strftime("%Y%m%dT%H%M%S")

    def ts_nodash_with_tz(v: Any) -> Optional[str]:
        return None if v is None else v.isoformat().replace("-", "").replace(":", "")
    return {"ds": ds, "ds_nodash": ds_nodash, "ts": ts, "ts_nodash": ts_nodash, "ts_nodash_with_tz": ts_nodash_with_tz}


def sample_context(now: Optional[datetime.datetime] = None) -> dict[str, Any]:
    """A run's template context for the sample interval: the last whole UTC day before ``now``."""
    import pendulum

    today = pendulum.instance(now or datetime.datetime.now(datetime.UTC)).in_timezone("UTC").start_of("day")
    start, end = today.subtract(days=1), today
    ds = start.strftime("%Y-%m-%d")
    ts = start.isoformat()
    context: dict[str, Any] = {
        "data_interval_start": start, "data_interval_end": end, "logical_date": start,
        "prev_data_interval_start_success": start.subtract(days=1), "prev_data_interval_end_success": start,
        "prev_start_date_success": end, "prev_end_date_success": end,
        "ds": ds, "ds_nodash": ds.replace("-", ""), "ts": ts, "ts_nodash": start.strftime("%Y%m%dT%H%M%S"),
        "ts_nodash_with_tz": ts.replace("-", "").replace(":", ""),
        "run_id": f"scheduled__{ts}", "task_instance_key_str": f"sample__{ds.replace('-', '')}",
        "params": {}, "macros": _Macros(), "try_number": 1, "task_reschedule_count": 0, "test_mode": False,
        "expanded_ti_count": None, "partition_key": None, "partition_date": None,
    }
    context.update({name: _Sample() for name in _RUN_ONLY})
    return context


def render(template: str, context: Mapping[str, Any]) -> str:
    """``template`` rendered as Airflow renders a template field; Jinja's errors raise."""
    import jinja2
    from jinja2.sandbox import SandboxedEnvironment

    env = SandboxedEnvironment(undefined=jinja2.StrictUndefined, extensions=["jinja2.ext.do"], cache_size=0)
    env.filters.update(_filters())
    return env.from_string(template).render(**context)


def check_templates(table: str, properties: Mapping[str, str], *, now: Optional[datetime.datetime] = None) -> None:
    """Refuse (:class:`ConfigError`, one line naming ``table``, the property and Jinja's
    message) a templated property in ``properties`` that does not render on the sample
    interval, or renders to nothing. Other properties, and empty values (being
    cleared), are not looked at."""
    values = {k: v for k, v in properties.items() if k in TEMPLATE_PROPERTIES and v}
    if not values:
        return
    import jinja2

    context = sample_context(now)
    when = f"{context['data_interval_start'].isoformat()} to {context['data_interval_end'].isoformat()}"
    for name, value in values.items():
        try:
            rendered = render(value, context)
        except ConfigError as e:
            raise ConfigError(f"table {table!r}: property {name}={value!r}: {e}") from e
        except (jinja2.TemplateError, TypeError, ValueError, AttributeError, ArithmeticError, LookupError) as e:
            message = " ".join(str(e).split()) or type(e).__name__
            raise ConfigError(f"table {table!r}: property {name}={value!r} does not render as an Airflow template "
                              f"on a sample interval ({when}): {type(e).__name__}: {message}") from e
        if not rendered.strip():
            raise ConfigError(f"table {table!r}: property {name}={value!r} renders to nothing on a sample interval "
                              f"({when})")
