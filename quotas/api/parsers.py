"""The API's request parsers."""

from __future__ import annotations

from rest_framework.parsers import JSONParser


class LenientJSONParser(JSONParser):
    """JSON that may carry NaN and Infinity (Python's json.dumps writes them), so the engine can refuse them by name."""

    strict = False
