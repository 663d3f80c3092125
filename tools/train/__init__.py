"""Training: the bundled demo family (`python -m tools.train.demo_models`, pipeline in demo_training/), its learned
heads (`python -m tools.train.heads`, pipeline in head_training/), averaging heads and re-evaluating the family."""
