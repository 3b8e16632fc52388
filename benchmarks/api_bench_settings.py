"""Settings of ``benchmarks/api_bench.py``: the portal's own, served with the benchmark's URLconf.

Everything else (database, Redis, authentication, middleware) stays the portal's, so the trivial
baseline view pays exactly what the measured endpoints pay before their own work starts.
"""

from portal.settings import *  # noqa: F403

ROOT_URLCONF = "benchmarks.api_bench_urls"
