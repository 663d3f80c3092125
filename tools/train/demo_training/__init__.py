"""Training pipeline for the bundled offline demo models (target, draft, tokenizer).

The pipeline is split into small stages (corpus -> tokenizer -> packed tokens ->
target with early-exit loss -> distilled draft -> export -> evaluation -> model
card) so that each stage can be cached and resumed independently. The entry
point is ``tools/train/demo_models.py``.
"""
