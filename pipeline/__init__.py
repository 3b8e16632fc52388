"""PySpark jobs: rollups, what-if replays and right-sizing advice over the Parquet history.

No Django here: these jobs run under spark-submit (local mode by default, any
cluster with ``--master``) and may use ``engine`` but never the portal.
"""
