"""Corpus cleaning: read sources, normalize, tag channel, filter, deduplicate, write Parquet."""
