"""One entity's what-if on the driver: its records read from a local landing area (pyarrow, no Spark action) and
its figures, budget figures and advice computed there with the functions the executors run (``fits_driver``: a
preview's usual case)."""

from __future__ import annotations

import os
from pathlib import Path
from urllib.parse import urlparse

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from engine.entities import DEFAULT

from .advice import advise
from .budget_replay import replay_budget
from .errors import CorruptInput
from .figures import Figures, budget_figures, figures, replay_entity
from .usage import check_entity

#: Up to this much landed usage and samples (a local landing area), a preview reads its entity's records and samples
#: on the driver (pyarrow) and computes its figures there (``pipeline.whatif``'s ``_on_driver``); above it, or with
#: ``--distributed``, on the executors. A warm local session runs an action in a few hundred ms, and the executors'
#: way is seven of them (the names' pass, the replay's shuffle, the clients, the count, the advice, the samples) for a
#: few thousand records.
DRIVER_MAX_BYTES = 256 * 1024**2
_COLLECTED = [("cluster", "string"), ("broker", "long"), ("quota_type", "string"), ("user", "string"),
              ("client_id", "string"), ("seq", "long"), ("t_ms", "long"), ("value", "double")]


def fits_driver(root: str) -> bool:
    """Whether ``root`` is a local folder whose landed usage and samples add up to at most ``DRIVER_MAX_BYTES``."""
    url = urlparse(root)
    if url.scheme not in ("", "file"):
        return False
    total = 0
    for dataset in ("usage", "samples"):
        for directory, _dirs, files in os.walk(Path(url.path if url.scheme else root) / dataset):
            total += sum(os.stat(os.path.join(directory, f)).st_size for f in files)
            if total > DRIVER_MAX_BYTES:
                return False
    return True


def local_folder(root: str) -> Path | None:
    """The folder of a local landing area (a path or a ``file:`` URI); None for any other URI."""
    url = urlparse(root)
    return Path(url.path if url.scheme else root) if url.scheme in ("", "file") else None


def read_local_usage(root: str, cluster: str, quota_type: str, user: str | None,
                     client_id: str | None, *, everyone: bool = False) -> pd.DataFrame | None:
    """The records ``governed(load_usage(...), blank=False)`` selects, read on the driver from a local landing area
    (pyarrow: no Spark action, the filters pushed to the files' row groups), ``seq`` their order in the files taken by
    name (the landed order); None when no usage file was landed. Files and folders starting with ``_`` or ``.`` are
    never read, as ``pipeline.session.read_dataset`` reads them. ``everyone``: every record of the cluster and quota
    type (a group's members are picked from them by name), the entity then naming nothing."""
    folder = local_folder(root)
    if folder is None or not (folder / "usage").is_dir():
        return None
    if not everyone:
        check_entity(user, client_id)
    try:
        found = ds.dataset(str(folder / "usage"), format="parquet", partitioning="hive")
        files = sorted(found.files)
        if not files:
            return None
        keep = (pc.field("cluster") == cluster) & (pc.field("quota_type") == quota_type)
        for column, name in (("user", user), ("client_id", client_id)):
            if name is not None and name != DEFAULT:
                keep &= pc.field(column) == name
        table = ds.dataset(files, format="parquet", schema=found.schema, partitioning="hive",
                           partition_base_dir=str(folder / "usage")).to_table(
            columns=[c for c, _t in _COLLECTED if c != "seq"], filter=keep)
    except (pa.ArrowException, OSError) as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise CorruptInput(f"Unreadable Parquet under {folder / 'usage'}: {first[:500]}") from e
    rows = table.to_pandas()
    rows.insert(5, "seq", np.arange(len(rows), dtype=np.int64))
    return rows


def collect_records(records: DataFrame) -> pd.DataFrame:
    """The records (usage rows, or samples spread into records) as pandas, in one Spark action (Arrow)."""
    return records.select(*(F.col(c).cast(t).alias(c) for c, t in _COLLECTED)).toArrow().to_pandas()


def valid_records(rows: pd.DataFrame) -> pd.DataFrame:
    """``pipeline.usage.valid_usage`` on the driver: a finite value >= 0 at a known time on a known broker."""
    v = rows["value"]
    keep = v.notna() & (v >= 0) & np.isfinite(v) & rows["t_ms"].notna() & rows["broker"].notna()
    good = rows[keep]
    return good.astype({"broker": "int64", "seq": "int64", "t_ms": "int64", "value": "float64"})


def shared_sensors(rows: pd.DataFrame, user: str | None, client_id: str | None) -> pd.DataFrame:
    """``pipeline.usage.share_sensors`` on the driver: the entity's absent parts blanked."""
    blank = {c: "" for c, name in (("user", user), ("client_id", client_id)) if name is None}
    return rows.assign(**blank) if blank else rows


def summarize_on_driver(good: pd.DataFrame, quota_type: str, quota: float | None, *, samples: int = 11,
                        window_ms: int = 1000, closed: bool = True,
                        entity: tuple[str | None, str | None] | None = None) -> dict | None:
    """``summarize_proposal``'s figures computed on the driver from collected records (one cluster); None without."""
    if good.empty:
        return None
    part = Figures(window_ms)
    for (user, client_id), g in good.groupby(["user", "client_id"], sort=False, dropna=False):
        order = np.lexsort((g["seq"].to_numpy(), g["t_ms"].to_numpy(), g["broker"].to_numpy()))
        broker, t_ms, values = (g[c].to_numpy()[order] for c in ("broker", "t_ms", "value"))
        replay_entity(part, str(user), str(client_id), broker, t_ms, values, quota_type=quota_type, quota=quota,
                       samples=samples, window_ms=window_ms, closed=closed, entity=entity, replay_all=False)
    return figures([part.part()], window_ms)


def budget_on_driver(good: pd.DataFrame, quota_type: str, budget: float, *, samples: int = 11, window_ms: int = 1000,
                     entity: tuple[str | None, str | None] | None = None) -> dict | None:
    """``summarize_budget``'s figures computed on the driver from collected records; None without."""
    if good.empty:
        return None
    rows = pd.concat([replay_budget(g, quota_type, budget, samples=samples, window_ms=window_ms, entity=entity)
                      for _, g in good.groupby(["cluster", "user", "client_id"], sort=False, dropna=False)],
                     ignore_index=True)
    return budget_figures(rows, budget, window_ms)


def advise_on_driver(good: pd.DataFrame, target: float, samples: int = 11, window_ms: int = 1000,
                     entity: tuple[str | None, str | None] | None = None) -> pd.DataFrame:
    """``pipeline.advice.advise_usage`` on the driver: one advice row per (cluster, quota type, user, client-id),
    ordered by user and client-id."""
    rows = [advise(g.reset_index(drop=True), target, samples, window_ms, entity)
            for _, g in good.groupby(["cluster", "quota_type", "user", "client_id"], sort=True, dropna=False)]
    if not rows:
        return pd.DataFrame()
    return pd.concat(rows, ignore_index=True).sort_values(["user", "client_id"], kind="stable")
