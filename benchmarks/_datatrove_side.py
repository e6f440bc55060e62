"""Runs inside a venv that has datatrove: the four English filter families over a JSONL of documents.

    <datatrove-venv>/bin/python benchmarks/_datatrove_side.py docs.jsonl
prints {"docs", "kept", "seconds"} as JSON. Filters run in pipeline order and a
document stops at its first failure, as in a datatrove pipeline.
"""
import json
import sys
import time

from datatrove.data import Document
from datatrove.pipeline.filters import (C4QualityFilter, FineWebQualityFilter, GopherQualityFilter,
                                        GopherRepetitionFilter)


def main() -> None:
    docs = [Document(text=json.loads(line)["text"], id=str(i)) for i, line in enumerate(open(sys.argv[1], encoding="utf-8"))]
    filters = [GopherRepetitionFilter(), GopherQualityFilter(), C4QualityFilter(), FineWebQualityFilter()]
    for f in filters:  # load tokenizers before timing
        f.filter(Document(text="Warm up the tokenizer. It has to load once.", id="w"))
    start = time.perf_counter()
    kept = 0
    for doc in docs:
        ok = True
        for f in filters:
            result = f.filter(doc)
            if result is not True and (result is False or not result[0]):
                ok = False
                break
        kept += ok
    print(json.dumps({"docs": len(docs), "kept": kept, "seconds": time.perf_counter() - start}))


if __name__ == "__main__":
    main()
