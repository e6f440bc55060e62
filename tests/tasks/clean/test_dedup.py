import json
import random

import pyarrow.dataset as ds
import pytest

from pretrain.config import CleanConfig, DedupConfig, ExecutorConfig, SourceConfig
from tasks.clean.dedup import UnionFind
from tasks.clean.minhash import MinHasher, jaccard_estimate
from tasks.clean.stage import run_clean

WORDS = ("river stone garden window morning letter market bridge silver forest harbour lantern valley "
         "orchard meadow candle ribbon kettle pepper violin shadow meadow cabin summit pebble quiet "
         "gentle bright early narrow ancient hollow patient distant").split()


def prose(seed: int, n_sentences: int = 12) -> str:
    rng = random.Random(seed)
    sentences = []
    for _ in range(n_sentences):
        words = [rng.choice(WORDS) for _ in range(rng.randint(8, 14))]
        sentences.append("The " + " ".join(words) + " and the " + rng.choice(WORDS) + " of the town.")
    return " ".join(sentences)


def write(path, texts):
    path.write_text("".join(json.dumps({"id": f"{path.stem}-{i}", "text": t}) + "\n" for i, t in enumerate(texts)))


def cfg_for(tmp_path, **dedup):
    rules_off = {k: {"mode": "off"} for k in ("gopher_quality", "gopher_repetition", "c4", "fineweb", "dirty", "garbage")}
    return CleanConfig(sources=[SourceConfig(path=str(tmp_path / "in" / "*.jsonl"), id_field="id")], rules=rules_off,
                       dedup=DedupConfig(**dedup), executor={"workers": 1}, shard_max_mb=1e-6)  # a shard per file


def kept_ids(tmp_path):
    return sorted(ds.dataset(tmp_path / "clean" / "kept").to_table().column("id").to_pylist())


def test_exact_duplicates_across_shards_keep_the_first_in_input_order(tmp_path):
    (tmp_path / "in").mkdir()
    a, b, c = prose(1), prose(2), prose(3)
    write(tmp_path / "in" / "a.jsonl", [a, b])
    write(tmp_path / "in" / "b.jsonl", [c, a, a])
    m = run_clean(cfg_for(tmp_path, near=False), tmp_path / "clean")
    assert m["rejected_by_reason"] == {"exact_duplicate": 2}
    assert kept_ids(tmp_path) == ["a-0", "a-1", "b-0"]
    rejects = ds.dataset(tmp_path / "clean" / "rejects").to_table().to_pylist()
    assert {r["id"] for r in rejects} == {"b-1", "b-2"} and {r["rule"] for r in rejects} == {"dedup"}


def test_near_duplicates_are_clustered_and_one_survives(tmp_path):
    (tmp_path / "in").mkdir()
    base = prose(7, 30)
    edited = base.replace("of the town.", "of the city.", 1)           # one word changed
    other = prose(8, 30)
    write(tmp_path / "in" / "a.jsonl", [other, edited])
    write(tmp_path / "in" / "b.jsonl", [base])
    m = run_clean(cfg_for(tmp_path), tmp_path / "clean")
    assert m["rejected_by_reason"] == {"near_duplicate": 1}
    assert kept_ids(tmp_path) == ["a-0", "a-1"]  # the edited copy came first in input order


def test_dedup_can_be_switched_off(tmp_path):
    (tmp_path / "in").mkdir()
    write(tmp_path / "in" / "a.jsonl", [prose(1), prose(1)])
    m = run_clean(cfg_for(tmp_path, exact=False, near=False), tmp_path / "clean")
    assert m["kept"] == 2


def test_minhash_estimates_jaccard():
    h = MinHasher(DedupConfig(bands=32, rows=8))
    a = prose(3, 40)
    assert jaccard_estimate(h.signature(a, "en"), h.signature(a, "en")) == 1.0
    assert jaccard_estimate(h.signature(a, "en"), h.signature(prose(4, 40), "en")) < 0.2
    zh = "清晨的菜市场总是最热闹的地方。卖豆腐的阿姨把刚做好的豆腐摆在木板上，冒着淡淡的热气。" * 3
    assert jaccard_estimate(h.signature(zh, "zh"), h.signature(zh.replace("阿姨", "大叔"), "zh")) > 0.6


def test_union_find_roots_at_smallest():
    uf = UnionFind()
    uf.union(5, 3)
    uf.union(9, 5)
    uf.union(1, 9)
    assert {uf.find(x) for x in (1, 3, 5, 9)} == {1}


@pytest.mark.parametrize("workers", [2])
def test_process_pool_gives_the_same_output(tmp_path, workers):
    (tmp_path / "in").mkdir()
    for k in range(4):
        write(tmp_path / "in" / f"{k}.jsonl", [prose(k * 10 + i) for i in range(5)] + [prose(0)])
    serial = run_clean(cfg_for(tmp_path), tmp_path / "clean")
    ids_serial = kept_ids(tmp_path)
    cfg = cfg_for(tmp_path).model_copy(update={"executor": ExecutorConfig(workers=workers)})
    parallel = run_clean(cfg, tmp_path / "clean")
    assert parallel == serial and kept_ids(tmp_path) == ids_serial
