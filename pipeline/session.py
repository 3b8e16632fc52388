"""The SparkSession of the jobs, their shared CLI arguments, and reading the landing area safely.

Landing layout (written by the portal's Celery task): Parquet under ``<root>/usage/`` and
``<root>/samples/``, partitioned ``date=YYYY-MM-DD/hour=HH``. Files or directories whose name starts
with ``_`` or ``.`` are being written and are never read (not even ``_metadata``).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import urlparse

from .errors import CorruptInput, MissingInput, PipelineError, SparkUnavailable

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

DEFAULT_ROOT = os.environ.get("QUOTAS_LANDING_ROOT", ".run/landing")
DEFAULT_MASTER = "local[2]"


def base_parser(description: str) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--root", default=DEFAULT_ROOT, help="landing root (a path or any Hadoop-compatible URI)")
    p.add_argument("--master", default=DEFAULT_MASTER, help="Spark master (default local[2])")
    return p


def java_binary() -> str | None:
    """The ``java`` Spark will start (``$JAVA_HOME/bin/java``, else the PATH's), or None when there is none."""
    home = os.environ.get("JAVA_HOME")
    if home and Path(home, "bin", "java").exists():
        return str(Path(home, "bin", "java"))
    return shutil.which("java")


def build_session(master: str = DEFAULT_MASTER, app_name: str = "quotas-pipeline",
                  conf: dict[str, str] | None = None) -> SparkSession:
    """A SparkSession whose Python workers run this interpreter (the venv's).

    ``conf`` adds or overrides Spark settings; settings read at JVM start (``spark.driver.memory``) only take
    effect when this call starts the JVM.
    """
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    try:
        from pyspark.sql import SparkSession

        builder = (
            SparkSession.builder.master(master)
            .appName(app_name)
            .config("spark.sql.shuffle.partitions", "4")
            .config("spark.ui.enabled", "false")
            .config("spark.sql.session.timeZone", "UTC")
            .config("spark.sql.execution.arrow.pyspark.enabled", "true")
        )
        if master.startswith("spark://"):
            # a standalone cluster's executors start their Python workers in a folder of their own: they import the
            # jobs' modules (pipeline, engine) from where this process does (the same path on every worker)
            root = str(Path(__file__).resolve().parent.parent)
            builder = builder.config("spark.executorEnv.PYTHONPATH", os.pathsep.join(
                p for p in (root, os.environ.get("PYTHONPATH", "")) if p
            ))
        for key, value in (conf or {}).items():
            builder = builder.config(key, value)
        return builder.getOrCreate()
    except Exception as e:  # no Java, bad master, ...
        raise SparkUnavailable(f"Could not start Spark ({master}): {e}") from e


def _hidden(file: str, name: str) -> bool:
    """True when a path component below the dataset ``name`` starts with '_' or '.' (an in-progress write)."""
    rest = file.rsplit("/" + name + "/", 1)[-1]
    return any(part.startswith(("_", ".")) for part in rest.split("/") if part)


def read_dataset(spark: SparkSession, root: str, name: str, merge_schema: bool = False) -> DataFrame:
    """``<root>/<name>`` as a DataFrame, never reading in-progress files; typed errors when missing/corrupt.

    ``merge_schema``: the union of the files' columns (a column added later is null in older files), instead of one
    file's."""
    path = root.rstrip("/") + "/" + name
    reader = spark.read.option("mergeSchema", "true") if merge_schema else spark.read
    try:
        df = reader.parquet(path)
        files = df.inputFiles()
    except Exception as e:
        raise _translate(e, path) from e
    good = [f for f in files if not _hidden(f, name)]
    if not good:
        raise MissingInput(f"No landed Parquet files under {path}.")
    if len(good) != len(files):  # Spark keeps _metadata/_common_metadata and '_x=y' names: read explicitly
        try:
            df = reader.option("basePath", path).parquet(*good)
        except Exception as e:
            raise _translate(e, path) from e
    return df


def require_local_dataset(root: str, *names: str) -> None:
    """Raise MissingInput when ``root`` is a local folder holding none of the datasets ``names``: said before a JVM is
    started for nothing (a Hadoop URI is left to Spark, as ``read_dataset`` reads it)."""
    url = urlparse(root)
    if url.scheme not in ("", "file"):
        return
    folder = Path(url.path if url.scheme else root)
    if not any((folder / name).exists() for name in names):
        raise MissingInput(f"No landed data at {root.rstrip('/')}/{names[0]}.")


#: What Spark says when a file is not Parquet, or is cut short.
_UNREADABLE = ("is not a Parquet file", "footer", "FAILED_READ_FILE", "magic number", "EOFException",
               "CANNOT_READ_FILE")


def _translate(e: BaseException, path: str) -> PipelineError:
    text = str(e)
    if "PATH_NOT_FOUND" in text or "Path does not exist" in text or "UNABLE_TO_INFER_SCHEMA" in text:
        return MissingInput(f"No landed data at {path}.")
    first = text.strip().splitlines()[0] if text.strip() else type(e).__name__
    if any(word in text for word in _UNREADABLE):
        return CorruptInput(f"Unreadable Parquet under {path}: {first[:500]}")
    last = text.strip().splitlines()[-1] if text.strip() else type(e).__name__
    return PipelineError(f"The job failed on the data under {path}: {last[:500]}")


def run_job(argv: Sequence[str] | None, parse: Callable[[Sequence[str] | None], argparse.Namespace],
            job: Callable[[SparkSession, argparse.Namespace], dict], spark: SparkSession | None = None) -> int:
    """Parse, run, print the JSON result; a PipelineError prints ``{"error": ...}`` on stderr and exits 2."""
    try:
        args = parse(argv)
        own = spark is None
        session = spark if spark is not None else build_session(args.master)
        try:
            try:
                result = job(session, args)
            except PipelineError:
                raise
            except Exception as e:  # a corrupt file surfaces when the job executes
                raise _translate(e, args.root) from e
        finally:
            if own:
                session.stop()
    except PipelineError as e:
        e.report()
        return e.exit_status
    print(json.dumps(result, indent=1, default=str))
    return 0
