"""pytest plugin for tests/architecture/test_tiers.py: after collection, one line per test with its tier markers.

``TIERS <node id> <marker,...>``: the markers tests/tiers.py gave it (what ``-m`` selects by), so one collection
answers what several ``-m`` collections would, each of which costs a whole pytest start.
"""

from __future__ import annotations

import pytest

TIERS = ("kafka", "spark", "browser", "slow")


def pytest_collection_finish(session: pytest.Session) -> None:
    for item in session.items:
        names = sorted({mark.name for mark in item.iter_markers()} & set(TIERS))
        print(f"TIERS {item.nodeid} {','.join(names)}")
