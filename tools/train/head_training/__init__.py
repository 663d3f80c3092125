"""Training the learned drafter heads against a frozen target; the entry point is ``tools/train/heads.py``.

Stages: ``run`` (every number that shapes a run), ``data`` (the target's features
and soft labels, computed once and cached), ``losses`` (one per family, built on
the family's own training forward in ``app/engine/drafters/heads``, so training
computes what drafting computes) and ``family`` (train one family, export it).
"""
