"""One local SparkSession for all pipeline tests (the landing-layout writers are in tests/landing_files.py)."""

from __future__ import annotations

import logging
import sys
from collections.abc import Iterator

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
