"""Decoding: the pass loop (`decoder`: draft, verify in one target forward, keep, emit) and the events it builds
from a verified block (`pass_events`). The top of the engine's algorithm; the front ends reach it through
app/engine/engine.py.
"""
