"""Prefect tasks and the pure logic they wrap (one module per stage)."""
