"""Typed errors of the pipeline jobs, for the portal to show (``code`` to branch on, ``message`` to display)."""

from __future__ import annotations

import json
import sys


class PipelineError(Exception):
    """A job could not run on this input; nothing was written."""

    code = "PIPELINE_ERROR"
    exit_status = 2

    def __init__(self, message: str, code: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code

    def to_dict(self) -> dict[str, str]:
        return {"code": self.code, "message": self.message}

    def report(self) -> None:
        print(json.dumps({"error": self.to_dict()}), file=sys.stderr)


class BadArguments(PipelineError):
    code = "INVALID_REQUEST"


class MissingInput(PipelineError):
    code = "MISSING_INPUT"


class CorruptInput(PipelineError):
    code = "CORRUPT_INPUT"


class NoHistory(PipelineError):
    code = "NO_HISTORY"


class SparkUnavailable(PipelineError):
    code = "SPARK_UNAVAILABLE"
