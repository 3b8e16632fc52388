"""The quota file core (quotafile), without Django."""
