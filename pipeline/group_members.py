"""A group quota's records: the members' traffic, found with the group's spec, replayed through one sensor.

A group's members share one Kafka sensor per broker (tags ``group@<name>:``, ``engine.groups``), so a proposed group
value is replayed over their records together: the records of every (user, client-id) name in the landing data that
the spec matches, relabeled to the group's sensor (user ``group@<name>``, an empty client-id), which the replay then
treats as one entity quota'd at the user level (``entity``). Per broker, each broker's records of all members go
through that broker's sensor; cluster-wide, the budget replay shares one budget over the brokers, as for any budget.

Assumption (said in the preview, as for an entity): the group's value is the one that applies to every member's
record, i.e. no member holds a value of its own at a level that names it.
"""

from __future__ import annotations

import pandas as pd
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from engine.errors import QuotaValidationError
from engine.groups import GROUP_KEYS, PER_BROKER_ONLY, GroupSpec, tag

from .errors import BadArguments

#: The group keys a group's replay judges (a group's controller mutation bucket is not replayed yet).
REPLAYED = tuple(k for k in GROUP_KEYS if k not in PER_BROKER_ONLY)


def parse_group(text: str, key: str) -> GroupSpec:
    """The group spec of ``--group`` (``GroupSpec.to_json``), when it can hold ``key``; BadArguments otherwise."""
    try:
        spec = GroupSpec.from_json(text)
    except QuotaValidationError as e:
        raise BadArguments(e.message) from e
    if key not in REPLAYED:
        raise BadArguments(f"A group's what-if holds {', '.join(REPLAYED)} only, not {key} (a group's controller "
                           "mutations are not replayed yet).")
    return spec


def entity_of(spec: GroupSpec) -> tuple[str, None]:
    """The config entity the replay sets the group's value on: its sensor's user, all client-ids."""
    return tag(spec.name), None


def members_frame(rows: pd.DataFrame, spec: GroupSpec) -> pd.DataFrame:
    """The records (pandas) of the group's members: each distinct name in them matched once."""
    if rows.empty:
        return rows
    names = rows[["user", "client_id"]].drop_duplicates()
    keep = {(u, c) for u, c in names.itertuples(index=False) if spec.matches(str(u or ""), str(c or ""))}
    mask = [(u, c) in keep for u, c in zip(rows["user"], rows["client_id"], strict=True)]
    return rows[mask]


def members_spark(rows: DataFrame, spec: GroupSpec) -> DataFrame:
    """The records (Spark) of the group's members: the distinct names collected and matched on the driver (a
    cluster's clients are few beside its records), then kept by a join on them."""
    names = [(r["user"], r["client_id"]) for r in rows.select("user", "client_id").distinct().collect()]
    keep = [(u, c) for u, c in names if spec.matches(str(u or ""), str(c or ""))]
    wanted = rows.sparkSession.createDataFrame(keep, "user string, client_id string")
    return rows.join(F.broadcast(wanted), ["user", "client_id"], "left_semi")


def one_sensor_frame(rows: pd.DataFrame, spec: GroupSpec) -> pd.DataFrame:
    """The members' records relabeled to the group's sensor (pandas)."""
    return rows.assign(user=tag(spec.name), client_id="")


def one_sensor_spark(rows: DataFrame, spec: GroupSpec) -> DataFrame:
    """The members' records relabeled to the group's sensor (Spark)."""
    return rows.withColumn("user", F.lit(tag(spec.name))).withColumn("client_id", F.lit(""))


__all__ = ["entity_of", "members_frame", "members_spark", "one_sensor_frame", "one_sensor_spark", "parse_group"]
