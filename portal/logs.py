"""The portal's logging: Django's ``LOGGING`` dict, plus a quiet access log (``LOGGING_CONFIG``).

A Prometheus scraping ``/metrics`` every few seconds and a load balancer or Kubernetes probing ``/healthz`` fill the
access log with lines nobody reads, and bury the requests people made. uvicorn logs every request on
``uvicorn.access``; the filter below drops the answered probes there (a failing one, status 400 and up, stays: it is
news). ``QUOTAS_LOG_PROBES=1`` keeps them all. The filter is added to the logger uvicorn configured, whatever started
it (``scripts/run_portal.sh``, the image, ``uvicorn --workers``), and changes nothing when uvicorn's access log is off.
"""

from __future__ import annotations

import logging
import logging.config
from typing import Any

ACCESS_LOGGER = "uvicorn.access"
#: The paths whose answered requests leave the access log: the metrics scrape and the health check.
PROBE_PATHS = frozenset({"/metrics", "/healthz"})


class QuietProbes(logging.Filter):
    """Drops uvicorn's access record of an answered probe (``GET /healthz`` 200, ``GET /metrics`` 200).

    uvicorn logs ``'%s - "%s %s HTTP/%s" %d'`` with (client, method, path?query, HTTP version, status).
    """

    def filter(self, record: logging.LogRecord) -> bool:
        args = record.args
        if not isinstance(args, tuple) or len(args) != 5:
            return True
        path, status = str(args[2]).partition("?")[0], args[4]
        return not (path in PROBE_PATHS and isinstance(status, int) and status < 400)


def configure(config: dict[str, Any]) -> None:
    """Django's ``LOGGING_CONFIG``: ``dictConfig(LOGGING)``, then probes out of the access log unless
    ``QUOTAS_LOG_PROBES`` keeps them."""
    from django.conf import settings

    logging.config.dictConfig(config)
    log_probes(settings.QUOTAS_LOG_PROBES)


def log_probes(keep: bool) -> None:
    """Keep the answered probes in uvicorn's access log, or leave them out (``QUOTAS_LOG_PROBES``)."""
    access = logging.getLogger(ACCESS_LOGGER)
    for existing in [f for f in access.filters if isinstance(f, QuietProbes)]:
        access.removeFilter(existing)  # configured again (a reload, the tests): one filter, as the setting says now
    if not keep:
        access.addFilter(QuietProbes())
