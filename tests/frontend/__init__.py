"""Tests of the portal's pages module (frontend)."""
