"""The live relay: samples and telemetry pushes fanned out to Channels groups, the WebSocket consumers that watch
them, their routing, the monitor API, and what they share (``monitoring``)."""
