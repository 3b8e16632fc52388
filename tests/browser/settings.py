"""Settings of the portal the browser tests start (uvicorn, collectstatic): the portal's own, with the static
files collected into the test session's folder (``BROWSER_TEST_STATIC_ROOT``) instead of ``.run/staticfiles``.

Everything else (database, Redis) comes from the environment as in production: ``DATABASE_URL`` points at the
test database file and ``QUOTAS_REDIS_URL`` at the test Redis.
"""

import os
from pathlib import Path

from portal.settings import *  # noqa: F403

STATIC_ROOT = Path(os.environ["BROWSER_TEST_STATIC_ROOT"])
