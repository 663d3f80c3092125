"""The measuring instruments behind `python -m app bench`: every method against autoregressive decoding and
Hugging Face's assisted generation (`methods`), chains against trees (`trees`), and ASD's speed / fidelity
sweep (`asd`). They drive the engine like any front end and are never imported by it.
"""
