"""The corpus sample the spam classifier's resemblance gate learns from (tasks/clean/resemblance.py).

Drawn once when the clean stage starts, before any shard: up to `classifier_reference_docs` documents, an equal
share from each source, spread over a source's files (the first documents of each, as many files as the share
allows), prepared as the rules see them (normalized, the rules' edits applied). Written as JSONL of channel and
text into the stage's scratch folder under a name that carries its digest: the path becomes a setting, so a shard
judged with another sample is not reused.
"""
from __future__ import annotations

import hashlib
import json
import math
import os
from pathlib import Path

from pretrain.config import CleanConfig
from tasks.clean.judge import Cleaner
from tasks.clean.readers import expand_source, iter_files

# characters of a sampled document kept: the gate reads 2,000 and the classifier judges texts shorter than twice its
# spam examples; 4,000 whole documents of up to length.max_chars (2 M) would be gigabytes
MAX_SAMPLE_CHARS = 20_000


def sampled_texts(cfg: CleanConfig, docs: int) -> list[tuple[str, str]]:
    """(channel, text) of up to `docs` documents of the sources, as the rules read them."""
    unlearned = cfg.model_copy(update={"rules": cfg.rules.model_copy(update={
        "dirty": cfg.rules.dirty.model_copy(update={"classifier_examples": []})})})
    per_source = math.ceil(docs / max(len(cfg.sources), 1))
    sample: list[tuple[str, str]] = []
    for index, source in enumerate(cfg.sources):
        source_cfg = unlearned.for_source(index)  # the source's own rule edits, as its shards apply them
        preparer, cap = Cleaner(source_cfg), 4 * source_cfg.rules.length.max_chars
        fs, files = expand_source(source)
        per_file = max(1, math.ceil(per_source / max(len(files), 1)))
        taken = 0
        for path in files:
            if taken >= per_source:
                break
            from_file = 0
            for raw in iter_files(fs, [path], source, [], cap):  # a file that breaks is the shard's to report
                if raw.problem:
                    continue
                prepared = preparer.prepare(raw)
                if prepared.text.strip():
                    sample.append((prepared.channel, prepared.text[:MAX_SAMPLE_CHARS]))
                    from_file += 1
                if from_file >= min(per_file, per_source - taken):
                    break
            taken += from_file
    return sample[:docs]


def draw_reference(cfg: CleanConfig, work_dir: Path) -> Path:
    """The sample written under work_dir; its name carries the digest of its contents."""
    lines = "".join(json.dumps({"channel": c, "text": t}, ensure_ascii=False) + "\n"
                    for c, t in sampled_texts(cfg, cfg.rules.dirty.classifier_reference_docs))
    digest = hashlib.sha256(lines.encode()).hexdigest()[:12]
    path = Path(work_dir) / f"classifier_reference-{digest}.jsonl"
    if not path.exists():
        tmp = path.with_suffix(".tmp")
        tmp.write_text(lines, encoding="utf-8")
        os.replace(tmp, path)
    return path


def with_reference(cfg: CleanConfig, work_dir: Path) -> CleanConfig:
    """The config whose classifier gate reads a corpus sample: the one it names, else one drawn now. Unchanged when
    there is no classifier or no gate."""
    dirty = cfg.rules.dirty
    if not dirty.classifier_examples or not dirty.classifier_reference_docs or dirty.classifier_reference:
        return cfg
    dirty = dirty.model_copy(update={"classifier_reference": str(draw_reference(cfg, work_dir))})
    return cfg.model_copy(update={"rules": cfg.rules.model_copy(update={"dirty": dirty})})
