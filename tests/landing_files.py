"""Writers of small landing-layout datasets (Parquet under dataset/date=.../hour=...), for the pipeline, history
and browser tests alike: a module the tests import, not a conftest of one folder."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path


def write_landing(spark, root: Path, dataset: str, rows: list[dict], time_col: str) -> list[Path]:
    """Write rows as Parquet under root/dataset/date=.../hour=... (one file per hour); returns the dirs."""
    import pandas as pd

    df = pd.DataFrame(rows)
    when = pd.to_datetime(df[time_col], unit="ms", utc=True)
    dirs = []
    for (date, hour), part in df.groupby([when.dt.strftime("%Y-%m-%d"), when.dt.strftime("%H")]):
        d = root / dataset / f"date={date}" / f"hour={hour}"
        d.mkdir(parents=True, exist_ok=True)
        part.to_parquet(d / f"part-{len(list(d.iterdir())):05d}.parquet", index=False)
        dirs.append(d)
    return dirs


def hour_dir(root: Path, dataset: str, t_ms: int) -> Path:
    when = datetime.fromtimestamp(t_ms / 1000, UTC)
    return root / dataset / f"date={when:%Y-%m-%d}" / f"hour={when:%H}"
