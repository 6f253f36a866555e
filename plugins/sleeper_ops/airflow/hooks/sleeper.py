"""SleeperHook: a :class:`~sleeper_ops.api.Sleeper` opened from an Airflow connection.

    from sleeper_ops.airflow.hooks.sleeper import SleeperHook
    with SleeperHook("sleeper_default").get_conn() as sleeper:
        sleeper.table("events").query(keys=["abc"])

The connection (type ``sleeper``) names the state store and the object store; its
fields are described in :mod:`sleeper_ops.airflow.hooks.connection`.

Which Sleeper the hook opens (nothing falls back silently):

* the connection ``sleeper_conn_id``, when Airflow has it (whatever its id);
* else, only when the id is the default, ``sleeper_default`` (what every operator,
  sensor and trigger uses unless given ``sleeper_conn_id``): the Sleeper configured by
  ``SLEEPER_HOME`` (see :func:`sleeper_ops.airflow.task_runner.configured_home`), saying
  so in the task log. This is how the generated DAGs, and ``dags test`` with nothing but
  ``SLEEPER_HOME`` set, run. Passing ``sleeper_conn_id="sleeper_default"`` is the same as
  passing nothing;
* any other id that does not exist (a typo such as ``sleeper_prdo``) fails the task
  without retries (``AirflowFailException``) in one line naming the id: it never opens
  the local ``SLEEPER_HOME`` in place of the store the DAG meant.

Any other failure to read the connection is raised, never mistaken for "no connection".

When the connection names an AWS connection (its extra's ``aws_conn_id``; by default
``aws_default`` for the DynamoDB state store), the region, endpoint and keys for S3 and
DynamoDB come from that connection through the amazon provider's ``AwsBaseHook``
(:func:`aws_settings`), so a worker needs nothing but the two connections.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Optional

from airflow.sdk import BaseHook
from airflow.sdk.exceptions import AirflowFailException, AirflowNotFoundException

from sleeper_ops.airflow.hooks.connection import aws_conn_id_of, config_from_connection
from sleeper_ops.config import SleeperConfig, default_home

if TYPE_CHECKING:
    from sleeper_ops.api import Sleeper


class SleeperHook(BaseHook):
    """Opens Sleeper from the connection ``sleeper_conn_id``; from ``SLEEPER_HOME`` only
    when that is the default id and Airflow has no such connection (see the module
    docstring: any other missing id fails in one line naming it).

    Args:
        sleeper_conn_id: the Airflow connection of type ``sleeper`` (default ``sleeper_default``).
    """

    conn_name_attr = "sleeper_conn_id"
    default_conn_name = "sleeper_default"
    conn_type = "sleeper"
    hook_name = "Sleeper"

    def __init__(self, sleeper_conn_id: str = default_conn_name, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.sleeper_conn_id = sleeper_conn_id

    def get_config(self) -> SleeperConfig:
        """The configuration of the connection, or of ``SLEEPER_HOME`` when there is none."""
        try:
            conn = self.get_connection(self.sleeper_conn_id)
        except AirflowNotFoundException:
            if self.sleeper_conn_id != self.default_conn_name:
                raise AirflowFailException(missing_connection(self.sleeper_conn_id)) from None
            from sleeper_ops.airflow.task_runner import configured_home

            home = configured_home()
            self.log.info("no Airflow connection %r: using SLEEPER_HOME=%s", self.sleeper_conn_id, home)
            return SleeperConfig.load(home, create=False)
        # the connection form may store its fields as extra__sleeper__<name>
        prefix = f"extra__{self.conn_type}__"
        extra = {k.removeprefix(prefix): v for k, v in conn.extra_dejson.items() if v not in (None, "")}
        aws_conn_id = aws_conn_id_of(extra)
        aws = aws_settings(aws_conn_id) if aws_conn_id else None
        return config_from_connection(host=conn.host, port=conn.port, login=conn.login, password=conn.password,
                                      schema=conn.schema, extra=extra, default_home=default_home(), aws=aws)

    def get_conn(self) -> Sleeper:
        """A new :class:`~sleeper_ops.api.Sleeper`; close it (or use it as a context manager)."""
        from sleeper_ops.api import Sleeper

        return Sleeper(config=self.get_config())

    def test_connection(self) -> tuple[bool, str]:
        """Airflow's "Test" button (``POST /api/v2/connections/test``, enabled by
        ``[core] test_connection = Enabled``, which ``sleeper airflow`` and ``sleeper
        cluster`` set): open the state store and list its tables, then read the object
        store's root once. ``(True, "state store and object store <uri> reached: <n> Sleeper
        tables")``, or ``(False, <one line>)`` saying which of the two failed and why."""
        try:
            sleeper = self.get_conn()
        except Exception as e:
            return False, f"cannot open Sleeper from the connection: {_one_line(e)}"  # tested under a random id
        with sleeper:
            try:
                n = len(sleeper.tables())
            except Exception as e:
                return False, f"state store unreachable: {_one_line(e)}"
            try:
                sleeper.objects.fs.get_file_info(sleeper.objects.root)  # one request, whatever the store holds
            except Exception as e:
                return False, f"object store {sleeper.objects.uri} unreachable: {_one_line(e)}"
        return True, f"state store and object store {sleeper.objects.uri} reached: {n} Sleeper tables"


def _one_line(e: BaseException) -> str:
    """An exception's message on one line (a driver's message may span several)."""
    return " ".join(str(e).split()) or type(e).__name__


def missing_connection(conn_id: str) -> str:
    """The one line a hook whose connection ``conn_id`` does not exist fails with."""
    return (f"no Airflow connection {conn_id!r} (sleeper_conn_id): create it, or fix the id; only "
            f"{SleeperHook.default_conn_name!r} falls back to SLEEPER_HOME when it does not exist")


def connection_exists(conn_id: str) -> bool:
    """Whether Airflow knows the connection ``conn_id`` (any other failure is raised)."""
    try:
        BaseHook.get_connection(conn_id)
    except AirflowNotFoundException:
        return False
    return True


def aws_settings(aws_conn_id: str) -> dict[str, Optional[str]]:
    """``region``, ``endpoint_url``, ``access_key`` and ``secret_key`` of the Airflow AWS
    connection ``aws_conn_id``, as ``AwsBaseHook`` resolves them (the connection's login,
    password and extra, else boto3's chain); None where it has none."""
    from airflow.providers.amazon.aws.hooks.base_aws import AwsBaseHook

    hook = AwsBaseHook(aws_conn_id=aws_conn_id, client_type="s3")
    session = hook.get_session()
    credentials = session.get_credentials()
    frozen = credentials.get_frozen_credentials() if credentials is not None else None
    return {"region": session.region_name or hook.conn_config.region_name,
            "endpoint_url": hook.conn_config.endpoint_url,
            "access_key": frozen.access_key if frozen is not None else None,
            "secret_key": frozen.secret_key if frozen is not None else None}


__all__ = ["SleeperHook", "aws_settings", "connection_exists", "missing_connection"]

