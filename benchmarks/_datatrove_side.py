"""Runs inside a venv that has datatrove: the four English filter families, or its exact dedup, over a JSONL of documents.

    <datatrove-venv>/bin/python benchmarks/_datatrove_side.py filters docs.jsonl
    <datatrove-venv>/bin/python benchmarks/_datatrove_side.py exact-dedup docs.jsonl WORK_DIR
prints {"docs", "kept", "seconds"} as JSON. Filters run in pipeline order and a
document stops at its first failure, as in a datatrove pipeline. Exact dedup runs
datatrove's three steps (signatures, find duplicates, filter) on one task.
"""
import json
import sys
import time

from datatrove.data import Document


def load(path: str) -> list[Document]:
    return [Document(text=json.loads(line)["text"], id=str(i)) for i, line in enumerate(open(path, encoding="utf-8"))]


def filters(docs: list[Document]) -> tuple[int, float]:
    from datatrove.pipeline.filters import (C4QualityFilter, FineWebQualityFilter, GopherQualityFilter,
                                            GopherRepetitionFilter)
    steps = [GopherRepetitionFilter(), GopherQualityFilter(), C4QualityFilter(), FineWebQualityFilter()]
    for f in steps:  # load tokenizers before timing
        f.filter(Document(text="Warm up the tokenizer. It has to load once.", id="w"))
    start = time.perf_counter()
    kept = 0
    for doc in docs:
        ok = True
        for f in steps:
            result = f.filter(doc)
            if result is not True and (result is False or not result[0]):
                ok = False
                break
        kept += ok
    return kept, time.perf_counter() - start


def text_of(doc: Document) -> bytes:
    return doc.text.encode()  # datatrove's default xxhash takes bytes


def exact_dedup(docs: list[Document], work: str) -> tuple[int, float]:
    from datatrove.pipeline.dedup.exact_dedup import (ExactDedupConfig, ExactDedupFilter, ExactDedupSignature,
                                                      ExactFindDedups)
    config = ExactDedupConfig(content_getter=text_of)
    start = time.perf_counter()
    ExactDedupSignature(f"{work}/sigs", config).run(iter(docs), rank=0, world_size=1)
    for _ in ExactFindDedups(f"{work}/sigs", f"{work}/dups", config).run(None, rank=0, world_size=1) or ():
        pass
    kept = sum(1 for _ in ExactDedupFilter(f"{work}/dups", config).run(iter(docs), rank=0, world_size=1))
    return kept, time.perf_counter() - start


def main() -> None:
    mode, path = sys.argv[1], sys.argv[2]
    docs = load(path)
    kept, seconds = filters(docs) if mode == "filters" else exact_dedup(docs, sys.argv[3])
    print(json.dumps({"docs": len(docs), "kept": kept, "seconds": seconds}))


if __name__ == "__main__":
    main()
