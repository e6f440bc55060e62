"""Prefect flows: orchestration only. Each stage is a flow of its own and a sub-flow of `pretrain`."""
