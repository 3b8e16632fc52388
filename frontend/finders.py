"""A static-files finder that serves plotly.js from the plotly pip package, never from a CDN.

The ``plotly`` package (requirements.txt) ships the whole plotly.js bundle as
``plotly/package_data/plotly.min.js``. This finder exposes that one file, and nothing else of the
package, as the static file ``vendor/plotly.min.js``: ``collectstatic`` copies it into STATIC_ROOT with the
portal's own files and whitenoise serves it (compressed) like any of them.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from django.contrib.staticfiles.finders import BaseFinder
from django.core.checks import Error
from django.core.files.storage import FileSystemStorage

#: The URL path (under STATIC_URL) the pages load plotly.js from.
PLOTLY_STATIC_PATH = "vendor/plotly.min.js"
_PREFIX, _NAME = PLOTLY_STATIC_PATH.rsplit("/", 1)


def plotly_package_data() -> Path | None:
    """The plotly package's ``package_data`` folder (without importing plotly itself), or None."""
    spec = importlib.util.find_spec("plotly")
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations))) / "package_data"


class PlotlyFinder(BaseFinder):
    """Finds ``vendor/plotly.min.js`` in the installed plotly package (listed to collectstatic under that name)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        folder = plotly_package_data()
        self.source = folder / _NAME if folder is not None else None
        self.storage = FileSystemStorage(location=str(folder)) if folder is not None else None
        if self.storage is not None:
            self.storage.prefix = _PREFIX  # collectstatic and whitenoise put the listed file under vendor/

    def _present(self) -> bool:
        return self.source is not None and self.source.is_file()

    def check(self, **kwargs: Any) -> list[Error]:
        if self._present():
            return []
        return [
            Error(
                "plotly.js is missing: the plotly package (plotly/package_data/plotly.min.js) is not installed.",
                hint="Install requirements.txt (bash scripts/bootstrap.sh).",
                id="frontend.E001",
            )
        ]

    def find(self, path: str, find_all: bool = False, **kwargs: Any) -> str | list[str]:
        if path == PLOTLY_STATIC_PATH and self._present():
            found = str(self.source)
            return [found] if find_all or kwargs.get("all") else found
        return []

    def list(self, ignore_patterns: list[str] | None) -> Iterator[tuple[str, FileSystemStorage]]:
        if self._present() and self.storage is not None:
            yield _NAME, self.storage
