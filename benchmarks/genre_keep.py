"""How much of each genre of text the clean stage keeps, rule by rule, on documents nobody tuned on.

    python benchmarks/genre_keep.py --data DIR [--shared ../shared] [--score held-out|tune] [--show-removed N]

Genres (benchmarks/_genre_data.py: Chinese laws, poetry, medicine books, technical docs, fiction, news,
encyclopedia, reviews; English e-mail, medical abstracts, forum threads, technical docs, government regulation,
fiction, news, encyclopedia, web pages) from public repositories at fixed commits, checked by
hash, read from DIR (`<owner>+<name>/<path>`), and from the shared corpora; labeled spam/ham sets from the shared
corpora and SpamAssassin. Each is split into tune (even units: a law, a page, an e-mail, a poem) and held-out
(odd units) halves, held-out documents that copy a tune document or each other (exact or MinHash near-duplicate)
removed first and counted; only the held-out half is scored unless --score tune.

Every held-out document goes through the clean stage as `pretrain clean` runs it: every rule at its defaults,
dedup off (copies are not what is measured), one source per genre, and again with the dirty rule's classifier
learned from the tune halves of the shared labeled sets (`clean.rules.dirty.classifier_examples`, as
docs/clean.md tells a user to). A document is removed by the first rule that rejected it (the clean stage's
reject record). Documents under a length minimum as read are counted apart: `clean.rules.length.min_chars`, for
Chinese the Chinese rule's `min_cjk_chars` (20), for English Gopher's `min_doc_words` (50) and C4's
`min_num_sentences` (5) as the rules count them (a Markdown code block or equation counts), judged on the
normalized text before any rule's edit (a document that C4's line filters cut below them counts against the
rules). They say how the genre was cut, not how the rules judge text; the table shows the share of all documents
kept beside the share of the others. Beside the documents kept, the share of the judged characters that the kept
documents still hold after the rules' edits (C4 removes lines). The dirty rule's share is of every document over
`length.min_chars`: it judges short ones too.

Targets (issue 36): every high-value genre keeps >= 95% of its documents (those under the length minimum apart);
the dirty rule removes <= 0.5% of every clean genre and <= 1% of every labeled ham set.

Last, the genres whose loss is the web rules' design (e-mail, technical docs), and the SpamAssassin spam beside
them, run once more as a team would run a curated source of its own: with the source's own rule settings
(`clean.sources[].rules`, CURATED_RULES: C4, FineWeb and Gopher repetition score instead of drop), so the cost
of that choice in spam the quality rules no longer stop is shown with what it keeps.

--show-removed N prints, for each set, up to N documents the rules removed and up to N that the dirty rule removed
only with the classifier: read them with --score tune, never on the held-out halves.
"""
from __future__ import annotations

import json
import sys
import tempfile
from collections import Counter
from pathlib import Path

import pyarrow.parquet as pq

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks._corpus import benchmark_parser  # noqa: E402
from benchmarks._genre_data import LABELED, NOT_FOUND, SOURCES, Source, digest  # noqa: E402
from benchmarks._quality_data import Copies, labeled_sets, rate, split, without_copies  # noqa: E402
from pretrain.config import CleanConfig, RulesConfig  # noqa: E402
from tasks.clean.channel import detect_channel  # noqa: E402
from tasks.clean.features import DocFeatures, prose_and_set_aside  # noqa: E402
from tasks.clean.normalize import normalize_text  # noqa: E402
from tasks.clean.rules.english import sentence_count  # noqa: E402
from tasks.clean.stage import run_clean  # noqa: E402

KEEP_TARGET, DIRTY_CLEAN_TARGET, DIRTY_HAM_TARGET = 95.0, 0.5, 1.0
SHORT = "length/too_short"
# a curated source's own settings (clean.sources[].rules): the rules that cut a short message, its quoted reply and
# its signature, or a tutorial's lists, score instead (tag mode; the mixture can weight by the scores), while
# gopher_quality still drops what is not prose; decided on the tune halves: e-mail 75.4% -> 94.0% kept, technical
# docs 76.9% -> 94.9% (c4 alone 80.3% / 79.5%, with fineweb 87.0% / 88.5%)
CURATED_RULES = {"c4": {"mode": "tag"}, "fineweb": {"mode": "tag"}, "gopher_repetition": {"mode": "tag"}}
CURATED = ("en e-mail (", "en technical docs (", "en e-mail spam vs ham (SpamAssassin) spam")  # name prefixes


def halves(docs: list[tuple[str, str]]) -> tuple[list[str], list[str], int, int]:
    """(tune texts, held-out texts, exact copies removed, near copies removed): whole units on one side."""
    order = list(dict.fromkeys(unit for unit, _ in docs))
    side = {unit: k % 2 for k, unit in enumerate(order)}
    tune = [text for unit, text in docs if side[unit] == 0]
    held = without_copies([text for unit, text in docs if side[unit] == 1], Copies(tune), text_of=lambda t: t)
    return tune, held.rows, held.exact_copies, held.near_copies


def load_genre(source: Source, data: Path | None, corpora: Path) -> tuple[list[str], list[str], int, int] | str:
    """The genre's halves, or why it is left out."""
    root = corpora if source.shared else data
    if root is None:
        return f"not read: pass --data DIR holding {source.path} from {source.origin}"
    files = source.files(root)
    if not files or not all(f.is_file() for f in files):
        return f"missing: {root / source.path} ({source.pattern or 'the file'}) from {source.origin}"
    if source.sha256 and (found := digest(files, root / source.path)) != source.sha256:
        return f"different files at {root / source.path}: sha256 {found[:12]}, expected {source.sha256[:12]} " \
               f"({source.origin})"
    try:
        return halves(list(source.read(files)))
    except ImportError as err:  # a reader's optional package: that genre is left out, said, not the whole run
        return f"not read: {err}"


def labeled_halves(data: Path | None, corpora: Path) -> tuple[dict[str, list], dict[str, list], dict[str, list]]:
    """(tune rows of the shared labeled sets: what the classifier learns from, tune rows of every set, held-out
    rows of every set)."""
    examples, tune, held = {}, {}, {}
    for name, rows in labeled_sets(corpora / "dirty").items():
        examples[name], kept = split(rows)
        tune[name], held[name] = examples[name], kept.rows
    for name, origin, path, spam_glob, ham_glob, read in LABELED:
        base = data / path if data else None
        if base is None or not base.is_dir():
            print(f"{name}: missing, pass --data DIR holding {path} from {origin}")
            continue
        rows = [(True, t) for _, t in read(sorted(base.glob(spam_glob)))] + \
               [(False, t) for _, t in read(sorted(base.glob(ham_glob)))]
        tune[name], kept = split(rows)
        held[name] = kept.rows
    return examples, tune, held


def examples_file(tune: dict[str, list], path: Path) -> Path:
    with open(path, "w", encoding="utf-8") as f:
        for rows in tune.values():
            for is_spam, text in rows:
                f.write(f"{int(is_spam)}\t{' '.join(text.split())}\n")
    return path


def judged(texts: dict[str, list[str]], work: Path, examples: Path | None, run: str = "",
           source_rules: dict | None = None) -> tuple[dict, dict]:
    """(source name -> {document index: 'rule/reason' that removed it}, source name -> {document index: characters
    of the kept text, after the rules' edits}), from one clean-stage run over all of them (each source with
    `source_rules` as its own rule settings when given)."""
    run = run or ("clean-classifier" if examples else "clean")
    sources = []
    for name, docs in texts.items():
        path = work / f"{run}-{len(sources):03d}.jsonl"
        path.write_text("".join(json.dumps({"id": f"{len(sources)}:{k}", "text": t}, ensure_ascii=False) + "\n"
                                for k, t in enumerate(docs)), encoding="utf-8")
        sources.append({"path": str(path), "name": f"s{len(sources):03d}", "id_field": "id",
                        "rules": source_rules or {}})
    cfg = CleanConfig(sources=sources, dedup={"exact": False, "near": False},
                      rules={"dirty": {"classifier_examples": [str(examples)] if examples else []}})
    out = work / run
    run_clean(cfg, out)
    removed: dict[str, dict[int, str]] = {name: {} for name in texts}
    for name, k, row in rows_by_document(out / "rejects", list(texts), ["rule", "reason"]):
        removed[name][k] = f"{row['rule']}/{row['reason']}"
    kept_chars: dict[str, dict[int, int]] = {name: {} for name in texts}
    for name, k, row in rows_by_document(out / "kept", list(texts), ["text"]):
        kept_chars[name][k] = len(row["text"])
    return removed, kept_chars


def rows_by_document(folder: Path, names: list[str], columns: list[str]):
    """(source name, document index, row) of every row of the clean stage's parquet parts in folder."""
    for part in sorted(folder.glob("*.parquet")):
        for row in pq.read_table(part, columns=["id", *columns]).to_pylist():
            source, k = row["id"].split(":")
            yield names[int(source)], int(k), row


def under_length_minimum(text: str, rules: RulesConfig) -> bool:
    """Whether the document as read (normalized, before any rule's edit) is under a length minimum of the rules:
    `length.min_chars`, for Chinese `chinese.min_cjk_chars` (a section that is a heading and its images), and for
    English Gopher's `min_doc_words` (every word, code too) and C4's `min_num_sentences` over the prose (a Markdown
    page's fenced code and display equations set aside, each counting as one sentence, as a line without a
    sentence end does), as the rules count."""
    text, _ = normalize_text(text)
    if len(text) < rules.length.min_chars:
        return True
    feats = DocFeatures(text)
    channel = detect_channel(feats)
    if channel == "zh":
        return feats.n_cjk < rules.chinese.min_cjk_chars
    if channel != "en":
        return False
    c4 = rules.c4
    prose, set_aside = prose_and_set_aside(text, c4.keep_fenced_code, c4.keep_tex_math)
    sentences = sentence_count(DocFeatures(prose)) + set_aside
    return len(feats.words) < rules.gopher_quality.min_doc_words or sentences < c4.min_num_sentences


def dirty(removed: dict[int, str]) -> int:
    return sum(1 for r in removed.values() if r.startswith("dirty/"))


def genre_row(name: str, source: Source, docs: list[str], removed: dict[int, str], kept_chars: dict[int, int],
              removed_c: dict[int, str], copies: tuple[int, int]) -> tuple[str, bool]:
    rules_cfg = RulesConfig()
    short = {k for k, t in enumerate(docs) if removed.get(k) == SHORT or under_length_minimum(t, rules_cfg)}
    judged_chars = sum(len(t) for k, t in enumerate(docs) if k not in short)
    text_kept = 100 * sum(kept_chars.values()) / max(judged_chars, 1)
    n = len(docs) - len(short)
    rules = Counter(r for k, r in removed.items() if k not in short)
    lost = sum(rules.values())
    # the dirty rule judges short documents too: its share is of every document over length.min_chars
    n_dirty = len(docs) - sum(1 for r in removed.values() if r == SHORT)
    dirty_c = dirty(removed_c)
    kept = 100 * (n - lost) / max(n, 1)
    kept_of_all = 100 * (len(docs) - len(removed)) / max(len(docs), 1)
    ok = (not source.high_value or kept >= KEEP_TARGET) and 100 * dirty_c / max(n_dirty, 1) <= DIRTY_CLEAN_TARGET
    top = ", ".join(f"{r} {c}" for r, c in rules.most_common(4)) or "-"
    print(f"{name:<58} {len(docs):>6} {copies[0] + copies[1]:>6} {len(short):>6} {kept_of_all:>6.1f}% {kept:>6.1f}% "
          f"{text_kept:>6.1f}% {rate(lost, n)}  {rate(dirty_c, n_dirty)}  {'ok' if ok else 'MISSED'}  {top}")
    return name, ok


def main() -> None:
    parser = benchmark_parser(__doc__)
    parser.add_argument("--data", type=Path, default=None, help="folder holding the repositories' files "
                        "(`<owner>+<name>/<path>`, benchmarks/_genre_data.py lists them)")
    parser.add_argument("--score", choices=["held-out", "tune"], default="held-out")
    parser.add_argument("--show-removed", type=int, default=0, metavar="N",
                        help="print up to N removed documents of each genre (read them on the tune half)")
    args = parser.parse_args()
    corpora = args.shared / "corpora"
    genres, texts = {}, {}
    for source in SOURCES:
        found = load_genre(source, args.data, corpora)
        if isinstance(found, str):
            print(f"{source.genre}: {found}")
            continue
        tune, held, exact, near = found
        genres[source.genre] = (source, (exact, near))
        texts[source.genre] = tune if args.score == "tune" else held
    examples, tune_rows, held_rows = labeled_halves(args.data, corpora)
    for name, rows in (tune_rows if args.score == "tune" else held_rows).items():
        texts[f"{name} spam"] = [t for is_spam, t in rows if is_spam]
        texts[f"{name} ham"] = [t for is_spam, t in rows if not is_spam]
    with tempfile.TemporaryDirectory(prefix="genre-keep-") as tmp:
        work = Path(tmp)
        plain, kept_chars = judged(texts, work, None)
        with_classifier, _ = judged(classifier_judges(texts, examples, args.score), work,
                                    examples_file(examples, work / "examples.tsv"))
        curated = {name: docs for name, docs in texts.items() if name.startswith(CURATED)}
        own_rules, _ = judged(curated, work, None, "clean-own-rules", CURATED_RULES)
    report(args, genres, texts, plain, kept_chars, with_classifier)
    report_curated(curated, genres, plain, own_rules)


def classifier_judges(texts: dict[str, list[str]], examples: dict[str, list], score: str) -> dict[str, list[str]]:
    """The texts of the run with the classifier: on the tune halves, not the rows it learns from, which would
    score themselves and, drawn into the corpus sample its gate compares with, teach the gate that the corpus
    looks like the examples."""
    if score != "tune":
        return texts
    own = {f"{name} {kind}" for name in examples for kind in ("spam", "ham")}
    return {name: docs for name, docs in texts.items() if name not in own}


def report(args, genres: dict, texts: dict, plain: dict, kept_chars: dict, with_classifier: dict) -> None:
    print(f"\nscored: the {args.score} halves; every rule at its defaults, dedup off; 'dirty +clf' = the dirty rule "
          f"with the classifier learned from the shared labeled tune halves")
    print("'text' = characters of the kept documents after the rules' edits (C4 removes lines), of all the judged "
          "(not short)")
    print("'short' = under a length minimum as read (length.min_chars; Chinese: 20 CJK characters; English: "
          "Gopher's 50 words, C4's 5 sentences, a code block or equation counting as one); 'all' = kept of every "
          "document, 'kept' = of the others (the target)")
    print(f"{'genre':<58} {'docs':>6} {'copies':>6} {'short':>6} {'all':>7} {'kept':>7} {'text':>7} "
          f"{'removed by the rules':>22}  {'dirty +clf':>22}  target  rules that removed most")
    results = [genre_row(name, source, texts[name], plain[name], kept_chars[name], with_classifier[name], copies)
               for name, (source, copies) in genres.items()]
    print(f"\n{'labeled set (' + args.score + ' rows)':<58} {'docs':>6} {'any rule (defaults)':>22}  "
          f"{'dirty (defaults)':>22}  {'dirty (+ classifier)':>22}")
    for name in texts:
        if name in genres:
            continue
        n = len(texts[name])
        if name not in with_classifier:
            print(f"{name:<58} {n:>6} {rate(len(plain[name]), n)}  {rate(dirty(plain[name]), n)}  "
                  f"{'(its examples)':>22}")
            continue
        print(f"{name:<58} {n:>6} {rate(len(plain[name]), n)}  {rate(dirty(plain[name]), n)}  "
              f"{rate(dirty(with_classifier[name]), n)}")
        if name.endswith(" ham"):
            results.append((name, 100 * dirty(with_classifier[name]) / max(n, 1) <= DIRTY_HAM_TARGET))
    missed = [name for name, ok in results if not ok]
    print(f"\ntargets: high-value genres keep >= {KEEP_TARGET:g}%; dirty rule <= {DIRTY_CLEAN_TARGET:g}% of a clean "
          f"genre and <= {DIRTY_HAM_TARGET:g}% of a ham set: {len(results) - len(missed)} of {len(results)} met"
          + (f"; missed: {', '.join(missed)}" if missed else ""))
    print(f"genres asked for that no reachable public source gave: {', '.join(NOT_FOUND)}")
    if args.show_removed:
        show_removed(texts, plain, with_classifier, args.show_removed)


def report_curated(texts: dict, genres: dict, plain: dict, own_rules: dict) -> None:
    print(f"\nwith the source's own rules (clean.sources[].rules: {json.dumps(CURATED_RULES)}), as a curated source "
          f"would run; not the targets' defaults")
    print(f"{'source':<58} {'docs':>6} {'short':>6} {'kept (defaults)':>16} {'kept (own rules)':>17}  "
          f"{'removed by the rules (own)':>26}  rules that removed most")
    rules_cfg = RulesConfig()
    for name, docs in texts.items():
        # a labeled set has no length minimum in the table above: every row is judged there too
        short = {k for k, t in enumerate(docs) if name in genres and
                 (plain[name].get(k) == SHORT or under_length_minimum(t, rules_cfg))}
        n = len(docs) - len(short)
        lost_default = sum(1 for k in plain[name] if k not in short)
        lost = Counter(r for k, r in own_rules[name].items() if k not in short)
        top = ", ".join(f"{r} {c}" for r, c in lost.most_common(3)) or "-"
        print(f"{name:<58} {len(docs):>6} {len(short):>6} {100 * (n - lost_default) / max(n, 1):>15.1f}% "
              f"{100 * (n - sum(lost.values())) / max(n, 1):>16.1f}%  {rate(sum(lost.values()), n)}  {top}")


def show_removed(texts: dict, removed: dict, removed_c: dict, limit: int) -> None:
    """Up to `limit` documents of each set that the rules removed, then those the dirty rule removed only with the
    classifier (what its gate let it judge)."""
    for name, by_index in removed.items():
        for k, rule in list((k, r) for k, r in by_index.items() if r != SHORT)[:limit]:
            print(f"  [{name}] {rule}: {one_line(texts[name][k])}")
        by_classifier = [k for k, r in removed_c.get(name, {}).items()
                         if r.startswith("dirty/") and not by_index.get(k, "").startswith("dirty/")]
        for k in by_classifier[:limit]:
            print(f"  [{name}] dirty with the classifier: {one_line(texts[name][k])}")


def one_line(text: str) -> str:
    return " ".join(text.split())[:160]


if __name__ == "__main__":
    main()
