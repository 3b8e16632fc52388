"""Quotas as code in the portal: export a cluster's state as a quota file, plan a file, apply a plan."""
