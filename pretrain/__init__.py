"""Pipeline-wide pieces: the config schema (lowest layer) and the CLI (top layer)."""
