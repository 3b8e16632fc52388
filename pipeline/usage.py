"""The landed usage records, and which of them a proposed quota on a (user, client-id) entity governs.

Kafka resolves each connection's quota to one config entity and keys its sensor by that entity's
tags, so the records a proposal governs, and how they share sensors, follow from the entity's shape:

- both parts named (``alice`` / ``app``): that client's records, one sensor;
- one part absent (``alice`` / none, or none / ``app``): every record of the named part, all in ONE
  sensor (tags ``alice:`` or ``:app``): the absent part is blanked so the records group together;
- a ``<default>`` part: every record matching the named part, each (user, client-id) its own sensor.

Assumption (said in the preview): the proposed quota is the one that applies to every selected record,
i.e. no more specific quota of the cluster takes precedence for some of them.
"""

from __future__ import annotations

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from quotas.engine.entities import DEFAULT

from .errors import BadArguments
from .session import read_dataset


def load_usage(spark: SparkSession, root: str) -> DataFrame:
    """The usage records with a ``seq`` that keeps the landed order of records at the same millisecond."""
    df = read_dataset(spark, root, "usage")
    return df.withColumn("seq", F.monotonically_increasing_id())


def valid_usage(df: DataFrame) -> DataFrame:
    """Records the model can replay: a finite value >= 0 at a known time on a known broker (others are counted as
    skipped)."""
    v = F.col("value")
    known = F.col("t_ms").isNotNull() & F.col("broker").isNotNull()
    return df.where(v.isNotNull() & ~F.isnan(v) & (v >= 0) & (v < float("inf")) & known)


def check_entity(user: str | None, client_id: str | None) -> None:
    """Refuse an entity that names nothing (a BadArguments the job reports)."""
    if user is None and client_id is None:
        raise BadArguments("Name a user principal, a client-id, or both (--user / --client-id).")


def governed(usage: DataFrame, cluster: str, quota_type: str, user: str | None, client_id: str | None, *,
             blank: bool = True) -> DataFrame:
    """The records of ``cluster`` and ``quota_type`` that the (user, client-id) entity's quota governs,
    with absent parts blanked (unless not ``blank``: ``share_sensors`` later) so that records sharing one sensor
    share one replay group."""
    check_entity(user, client_id)
    rows = usage.where((F.col("cluster") == cluster) & (F.col("quota_type") == quota_type))
    for column, name in (("user", user), ("client_id", client_id)):
        if name is not None and name != DEFAULT:
            rows = rows.where(F.col(column) == name)
    return share_sensors(rows, user, client_id) if blank else rows


def share_sensors(rows: DataFrame, user: str | None, client_id: str | None) -> DataFrame:
    """The entity's absent parts blanked: every record of the named part then shares one sensor."""
    for column, name in (("user", user), ("client_id", client_id)):
        if name is None:
            rows = rows.withColumn(column, F.lit(""))
    return rows
