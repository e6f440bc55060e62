import numpy as np
import pyarrow as pa
import pyarrow.dataset as ds

from model.data import CHANNELS, open_shard, read_manifest
from tasks.tokenize import run_tokenize
from tasks.tokenizer import load_tokenizer


def test_shards_match_manifest_and_source_text(prepared_run):
    cfg, root = prepared_run
    manifest = read_manifest(root / "tokens")
    total = 0
    for entry in manifest["shards"]:
        shard = open_shard(root / "tokens" / entry["file"])
        assert len(shard.tokens) == entry["tokens"] and len(shard.channels) == entry["docs"]
        assert shard.tokens.dtype == np.uint16  # vocab < 65536
        total += len(shard.tokens)
    assert total == manifest["total_tokens"] == sum(manifest["tokens_by_channel"].values())
    assert manifest["total_docs"] == ds.dataset(root / "clean" / "kept").count_rows()
    # first document decodes back to the first kept text, with EOS appended
    tok = load_tokenizer(root / "tokenizer")
    first = open_shard(root / "tokens" / manifest["shards"][0]["file"])
    ids = first.tokens[first.doc_offsets[0]:first.doc_offsets[1]].tolist()
    kept = ds.dataset(root / "clean" / "kept").to_table(columns=["text", "channel"]).to_pylist()[0]
    assert ids[-1] == manifest["eos_id"]
    assert tok.decode(ids[:-1], skip_special_tokens=False) == kept["text"]
    assert CHANNELS[first.channels[0]] == kept["channel"]


def test_shard_files_are_arrow_ipc(prepared_run):
    _, root = prepared_run
    reader = pa.ipc.open_file(root / "tokens" / "shard-00000.arrow")
    assert reader.schema.names == ["tokens", "channel", "source"]


def test_version_changes_with_config(prepared_run, tmp_path):
    cfg, root = prepared_run
    m1 = read_manifest(root / "tokens")
    m2 = run_tokenize(cfg.tokenize.model_copy(update={"shard_max_tokens": 1000}), root / "clean",
                      root / "tokenizer", tmp_path / "tokens")
    assert m2["total_tokens"] == m1["total_tokens"] and len(m2["shards"]) > len(m1["shards"])
    assert m2["version"] != m1["version"]
