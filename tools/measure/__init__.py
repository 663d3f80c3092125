"""Measurements behind the project's figures: drafters, execution modes, forwards, goals, startup, soak, real-size
costs and half precision. Each runs as `python -m tools.measure.NAME --help`."""
