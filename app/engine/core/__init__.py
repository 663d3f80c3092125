"""Core: the mathematics of a pass on plain tensors, no models and no caches.

The verification rules of a chain (`verify`) and of a tree (`tree`), the distributions tokens are drawn from
(`sampling`, `repetition`, `rowwise`), the statistics and the theory they are compared with (`stats`), the text
each token adds (`detok`), and what "the same output" means (`identity`, `fidelity`, `exact`). Imports only
the engine's plain-data modules (settings, events, errors).
"""
