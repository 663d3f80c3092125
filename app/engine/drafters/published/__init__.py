"""Published drafter checkpoints loaded for the target a user brings: EAGLE-3 (SafeAILab / SpecForge, vLLM's
speculators format) and Medusa (FasterDecoding), each format in a module of its own, told apart by `detect`."""
