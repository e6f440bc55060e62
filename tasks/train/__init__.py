"""The train stage: launching DeepSpeed ranks, watching them, recovering, exporting, plotting."""
