import hashlib

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from model.data import open_shard, read_manifest
from pretrain.channels import CHANNELS
from tasks.tokenize import run_tokenize
from tasks.tokenize.parts import tokenize_part
from tasks.tokenize.stage import complete, count_rejects_locally, plan_reject_counts, prepare, run_parts_locally
from tasks.tokenizer.train import load_tokenizer


def expected_streams(root) -> dict[tuple[str, str, str], list[list[int]]]:
    """(kept file, channel, source) -> each document's ids + EOS, in input order, straight from the tokenizer."""
    tok = load_tokenizer(root / "tokenizer")
    eos = tok.token_to_id("<|eos|>")
    out: dict = {}
    for path in sorted((root / "clean" / "kept").glob("*.parquet")):
        rows = pq.read_table(path, columns=["text", "channel", "source"]).to_pylist()
        for row, enc in zip(rows, tok.encode_batch([r["text"] for r in rows], add_special_tokens=False)):
            out.setdefault((path.name, row["channel"], row["source"]), []).append(enc.ids + [eos])
    return out


def test_every_document_round_trips_into_the_shards(prepared_run):
    _, root = prepared_run
    manifest = read_manifest(root / "tokens")
    got: dict = {}
    for entry in manifest["shards"]:
        shard = open_shard(root / "tokens" / entry["file"])
        key = (entry["input"], entry["channel"], manifest["sources"][entry["source_id"]])
        assert {CHANNELS[c] for c in shard.channels} == {entry["channel"]}
        assert set(shard.sources.tolist()) == {entry["source_id"]}
        docs = [shard.tokens[a:b].tolist() for a, b in zip(shard.doc_offsets[:-1], shard.doc_offsets[1:])]
        got.setdefault(key, []).extend(docs)
    assert got == expected_streams(root)


def test_manifest_counts_equal_shard_contents(prepared_run):
    _, root = prepared_run
    manifest = read_manifest(root / "tokens")
    by_channel, by_source = {}, {}
    for entry in manifest["shards"]:
        shard = open_shard(root / "tokens" / entry["file"])
        assert (len(shard.tokens), len(shard.channels)) == (entry["tokens"], entry["docs"])
        assert (root / "tokens" / entry["file"]).stat().st_size == entry["bytes"]
        assert shard.tokens.dtype == np.uint16  # vocab < 65536
        by_channel[entry["channel"]] = by_channel.get(entry["channel"], 0) + len(shard.tokens)
        name = manifest["sources"][entry["source_id"]]
        by_source[name] = by_source.get(name, 0) + len(shard.tokens)
    assert by_channel == manifest["tokens_by_channel"] and by_source == manifest["tokens_by_source"]
    assert sum(by_channel.values()) == manifest["total_tokens"]
    kept = sum(pq.ParquetFile(p).metadata.num_rows for p in (root / "clean" / "kept").glob("*.parquet"))
    assert manifest["total_docs"] == kept == sum(manifest["docs_by_source"].values())
    reader = pa.ipc.open_file(root / "tokens" / manifest["shards"][0]["file"])
    assert reader.schema.names == ["tokens", "channel", "source"]


def digests(folder) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.iterdir()) if p.is_file()}


def test_same_inputs_give_byte_identical_shards_for_any_worker_count(prepared_run, tmp_path):
    cfg, root = prepared_run
    small = cfg.tokenize.model_copy(update={"shard_max_tokens": 3000})
    outs = []
    for workers in (1, 2):
        settings = small.model_copy(update={"executor": small.executor.model_copy(update={"workers": workers})})
        run_tokenize(settings, root / "clean", root / "tokenizer", tmp_path / f"w{workers}")
        outs.append(digests(tmp_path / f"w{workers}"))
    assert outs[0] == outs[1] and len(outs[0]) > 4


def test_interrupted_stage_resumes_without_redoing_finished_parts(prepared_run, tmp_path):
    cfg, root = prepared_run
    out = tmp_path / "tokens"
    specs, settings, work_dir = prepare(cfg.tokenize, root / "clean", root / "tokenizer", out)
    assert len(specs) >= 2
    tokenize_part(specs[0], settings, work_dir)      # finished before the crash
    (work_dir / f"{specs[1].part_id}.tmp-999").mkdir()  # a part the crash left half-written
    metas = run_parts_locally(cfg.tokenize, specs, settings, work_dir)
    assert [m["skipped"] for m in metas] == [True] + [False] * (len(specs) - 1)
    counted = count_rejects_locally(cfg.tokenize, plan_reject_counts(cfg.tokenize, root / "clean", settings), settings,
                                    work_dir)
    manifest = complete(cfg.tokenize, specs, metas, settings, root / "clean", work_dir, out, counted)
    assert not work_dir.exists() and not list(tmp_path.glob("tokens.*"))
    assert digests(out) == digests(root / "tokens") and manifest == read_manifest(root / "tokens")


def test_version_changes_with_settings_and_input(prepared_run, tmp_path):
    cfg, root = prepared_run
    m1 = read_manifest(root / "tokens")
    m2 = run_tokenize(cfg.tokenize.model_copy(update={"shard_max_tokens": 1000}), root / "clean",
                      root / "tokenizer", tmp_path / "tokens")
    assert m2["total_tokens"] == m1["total_tokens"] and len(m2["shards"]) > len(m1["shards"])
    assert m2["version"] != m1["version"]


def test_missing_tokenizer_fails_before_any_work(prepared_run, tmp_path):
    cfg, root = prepared_run
    with pytest.raises(FileNotFoundError, match="tokenizer"):
        run_tokenize(cfg.tokenize, root / "clean", tmp_path / "no-tokenizer", tmp_path / "tokens")
    assert not (tmp_path / "tokens.parts").exists()


def test_shards_are_cut_at_document_boundaries_within_the_token_limit(prepared_run, tmp_path):
    cfg, root = prepared_run
    limit = 700
    manifest = run_tokenize(cfg.tokenize.model_copy(update={"shard_max_tokens": limit}), root / "clean",
                            root / "tokenizer", tmp_path / "tokens")
    for entry in manifest["shards"]:
        shard = open_shard(tmp_path / "tokens" / entry["file"])
        assert entry["tokens"] <= limit or entry["docs"] == 1  # only a single over-long document exceeds it
        assert shard.tokens[-1] == manifest["eos_id"]
    assert manifest["total_tokens"] == read_manifest(root / "tokens")["total_tokens"]


def test_rule_tokens_count_kept_and_rejected_documents(prepared_run):
    from tasks.tokenize.rejects import RULE_TOKENS, rule_table

    _, root = prepared_run
    manifest = read_manifest(root / "tokens")
    rows = pq.read_table(root / "tokens" / RULE_TOKENS).to_pylist()
    kept = {r["channel"]: r["tokens"] for r in rows if r["outcome"] == "kept"}
    assert kept == manifest["tokens_by_channel"]
    tok = load_tokenizer(root / "tokenizer")
    rejects = pq.read_table(root / "clean" / "rejects").to_pylist()
    expected: dict = {}
    for r in rejects:
        expected[r["rule"]] = expected.get(r["rule"], 0) + len(tok.encode(r["text"], add_special_tokens=False).ids) + 1
    assert expected and manifest["rejected_tokens_by_rule"] == expected
    table = rule_table(root / "clean", root / "tokens")
    rejected = [r for r in table if r["outcome"] == "rejected"]
    assert sum(r["documents"] for r in rejected) == len(rejects)
    assert all(r["tokens"] and r["characters"] for r in rejected)


def test_documents_a_tag_mode_rule_flagged_get_shards_of_their_own_quality(prepared_run, tmp_path):
    import json

    from model.data import DataError, TokenDataset
    from tasks.clean.stage import run_clean

    cfg, root = prepared_run
    families = sorted({r["rule"] for r in pq.read_table(root / "clean" / "rejects", columns=["rule"]).to_pylist()}
                      - {"dedup_exact", "dedup_near"})
    assert families  # the demo corpus fails some rules at their defaults
    rules = cfg.clean.rules.model_copy(update={f: getattr(cfg.clean.rules, f).model_copy(update={"mode": "tag"})
                                               for f in families if hasattr(cfg.clean.rules, f)})
    run_clean(cfg.clean.model_copy(update={"rules": rules}), tmp_path / "clean")
    manifest = run_tokenize(cfg.tokenize, tmp_path / "clean", root / "tokenizer", tmp_path / "tokens")
    tok = load_tokenizer(root / "tokenizer")
    eos = tok.token_to_id("<|eos|>")
    expected: dict = {}
    for path in sorted((tmp_path / "clean" / "kept").glob("*.parquet")):
        rows = pq.read_table(path, columns=["text", "flags"]).to_pylist()
        for row, enc in zip(rows, tok.encode_batch([r["text"] for r in rows], add_special_tokens=False)):
            quality = row["flags"][0].split(":")[0] if row["flags"] else "clean"
            expected.setdefault(quality, []).append(enc.ids + [eos])
    got: dict = {}
    for entry in manifest["shards"]:
        shard = open_shard(tmp_path / "tokens" / entry["file"])
        docs = [shard.tokens[a:b].tolist() for a, b in zip(shard.doc_offsets[:-1], shard.doc_offsets[1:])]
        got.setdefault(entry["quality"], []).extend(docs)
    assert {q: sorted(d) for q, d in got.items()} == {q: sorted(d) for q, d in expected.items()}
    assert len(got) > 1 and set(got) - {"clean"} <= set(families)  # the flagged text is kept, in its own pools
    assert manifest["docs_by_quality"] == {q: len(d) for q, d in expected.items()}
    dataset = TokenDataset(tmp_path / "tokens", 32, pool_by="quality")
    assert {p.name for p in dataset.pools} <= set(got) and "clean" in {p.name for p in dataset.pools}
    older = {**json.loads((tmp_path / "tokens" / "manifest.json").read_text())}
    del older["qualities"]
    (tmp_path / "tokens" / "manifest.json").write_text(json.dumps(older))
    with pytest.raises(DataError, match="needs token shards split by quality.*re-run `pretrain tokenize"):
        TokenDataset(tmp_path / "tokens", 32, pool_by="quality")
