"""Models of the desired quota state (the source of truth for what should be applied). None yet."""
