"""The work of each stage, one package per stage (plus common/), as plain functions on paths.

Nothing here imports Prefect: flows/ wraps these functions as Prefect tasks and flows.
"""
