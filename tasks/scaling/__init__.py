"""Compute planning: parametric scaling laws, fitting them to small runs, and the compute-optimal plan."""
