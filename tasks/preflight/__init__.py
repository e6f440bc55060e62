"""Cluster health checks that gate training."""
