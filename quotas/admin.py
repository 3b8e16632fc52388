"""Admin registrations for the quota models (none yet)."""
