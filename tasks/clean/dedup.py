"""Global deduplication across all shards: exact (DuckDB over hashes) then near (MinHash LSH bands).

Each kept document is addressed as doc = shard_index << 32 | row. Within a
group of duplicates the smallest address survives, so the result depends only
on the input order, never on scheduling.
"""
from __future__ import annotations

from pathlib import Path

import duckdb

from pretrain.config import DedupConfig


def _relation(con, work_dir: Path, shard_index: dict[str, int]) -> None:
    con.execute("CREATE TEMP TABLE shard_order (shard_id VARCHAR, shard_index BIGINT)")
    con.executemany("INSERT INTO shard_order VALUES (?, ?)", list(shard_index.items()))
    # the files as a bound list, not a glob in the SQL: a run root may hold a quote, a bracket or a star
    files = [str(Path(work_dir) / shard_id / "kept.parquet") for shard_id in sorted(shard_index)]
    con.execute("""
        CREATE TEMP TABLE docs AS
        SELECT (o.shard_index << 32) | (k.file_row_number) AS doc, k.hash, k.bands
        FROM read_parquet(?, filename = true, file_row_number = true) k
        JOIN shard_order o ON o.shard_id = regexp_extract(k.filename, '([^/]+)/kept\\.parquet$', 1)""", [files])


def exact_duplicates(con) -> dict[int, int]:
    """doc -> the doc it duplicates (the first with the same hash)."""
    rows = con.execute("""
        SELECT doc, first_doc FROM (
            SELECT doc, min(doc) OVER (PARTITION BY hash) AS first_doc FROM docs)
        WHERE doc <> first_doc""").fetchall()
    return dict(rows)


class UnionFind:
    def __init__(self):
        self.parent: dict[int, int] = {}

    def find(self, x: int) -> int:
        root = x
        while self.parent.get(root, root) != root:
            root = self.parent[root]
        while self.parent.get(x, x) != root:  # path compression
            self.parent[x], x = root, self.parent[x]
        return root

    def union(self, a: int, b: int) -> None:
        ra, rb = self.find(a), self.find(b)
        if ra != rb:
            self.parent[max(ra, rb)] = min(ra, rb)  # the smaller address is the root: it survives


def near_duplicates(con, exclude: dict[int, int]) -> dict[int, int]:
    """doc -> cluster survivor, for documents sharing any LSH band with another (exact duplicates excluded)."""
    con.execute("CREATE TEMP TABLE excluded (doc BIGINT)")
    if exclude:
        con.executemany("INSERT INTO excluded VALUES (?)", [(d,) for d in exclude])
    groups = con.execute("""
        SELECT list(doc) FROM (
            SELECT doc, generate_subscripts(bands, 1) AS band, unnest(bands) AS h
            FROM docs WHERE doc NOT IN (SELECT doc FROM excluded))
        GROUP BY band, h HAVING count(*) > 1""").fetchall()
    uf = UnionFind()
    for (docs,) in groups:
        for d in docs[1:]:
            uf.union(docs[0], d)
    return {d: uf.find(d) for d in list(uf.parent) if uf.find(d) != d}


def find_duplicates(work_dir: Path, shard_index: dict[str, int], cfg: DedupConfig) -> dict[int, tuple[str, int]]:
    """doc -> (reason, survivor doc) for every document to drop."""
    if not (cfg.exact or cfg.near) or not shard_index:
        return {}
    con = duckdb.connect()
    try:
        _relation(con, work_dir, shard_index)
        exact = exact_duplicates(con) if cfg.exact else {}
        near = near_duplicates(con, exact) if cfg.near else {}
    finally:
        con.close()
    return {**{d: ("near_duplicate", s) for d, s in near.items()}, **{d: ("exact_duplicate", s) for d, s in exact.items()}}
