"""One local SparkSession for all pipeline tests, and writers of small landing-layout datasets."""

from __future__ import annotations

import logging
import sys
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from pipeline.session import java_binary


@pytest.fixture(scope="session")
def spark() -> Iterator[object]:
    if java_binary() is None:
        reason = "pipeline tests need Java (no JAVA_HOME and no java on the PATH)"
        print(f"SKIP: {reason}", file=sys.stderr)
        pytest.skip(reason)
    from pipeline.session import build_session

    logging.getLogger("py4j").setLevel(logging.WARNING)  # its __del__ logs after pytest closed the streams

    session = build_session("local[2]", "quotas-pipeline-tests")
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()


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
