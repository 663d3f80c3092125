"""Teaching material generated from real runs: no Qt here, so tests and notebooks can read it too."""
