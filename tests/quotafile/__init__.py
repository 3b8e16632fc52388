"""The quota file core (quotas.quotafile), without Django."""
