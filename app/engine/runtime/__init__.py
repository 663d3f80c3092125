"""Runtime: how a model runs on a device.

A causal LM with its own KV cache (`cached_model`), the caches themselves (`static_cache`, `growing_cache`), the
lean chain forward (`lean_forward`), whether the short forwards are compiled (`execution`), and the device and
dtype (`devices`). Below the drafters and the decoder, above core.
"""
