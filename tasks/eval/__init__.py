"""The eval stage: scoring exported checkpoints on held-out text and lm-eval tasks."""
