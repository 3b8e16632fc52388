"""quotactl: the quota portal's command line (quotas as code, and a ``kafka-configs.sh``-compatible mode).

It talks to the portal's HTTP API only (``quotactl.client``), with a personal access token, so it runs wherever
Python 3.11 does: no Django, nothing of the portal is imported (an import contract in pyproject.toml keeps it so).
"""
