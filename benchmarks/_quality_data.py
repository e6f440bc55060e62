"""Labeled spam/ham sets and clean corpora for the dirty-filter benchmark, split so that quality is measured on
rows nobody tuned on.

Every set is split by position: tune = even rows (what the lists, the classifier and its threshold may see),
held-out = odd rows. Held-out rows that repeat a tune row (the same normalized text, or a near-duplicate by the
clean stage's own MinHash LSH) or an earlier held-out row are removed, and counted, before anything is scored:
copies of tune rows would credit the filter with memorised answers.
"""
from __future__ import annotations

import csv
import gzip
import hashlib
import json
import math
from dataclasses import dataclass
from pathlib import Path

from pretrain.config import DedupConfig
from tasks.clean.channel import detect_channel
from tasks.clean.features import DocFeatures
from tasks.clean.minhash import MinHasher, NearIndex
from tasks.clean.normalize import normalize_text

NEAR_JACCARD = 0.7
_SOPHON = "https://raw.githubusercontent.com/SophonPlus/ChineseNlpCorpus/a0b781d72158bde242c0626c9e354d2b328865ff/datasets"
_ZPDESU = ("https://raw.githubusercontent.com/ZPdesu/Spam-Message-Classifier-sklearn/"
           "c23407b9bd19a9817537d654f57acf2e7de069db/RawData")
EXTRA_FILES = {  # name in --extra DIR -> (sha256, where it comes from)
    "waimai_10k.csv": ("b8b5c11c00b51578d35937fca56e03a126b45381f1ea4b22893237cb377a26fe",
                       f"{_SOPHON}/waimai_10k/waimai_10k.csv"),
    "online_shopping_10_cats.csv": ("f6c5b724122d8547b700ac4524898eb7e28abbee63f798e95a8faa408829afdb",
                                    f"{_SOPHON}/online_shopping_10_cats/online_shopping_10_cats.zip (unzipped)"),
    "zh_sms_10k_content.json": ("9574f851c99e40f2d01461b9f073a2348298cdf16840b1a72310e7aa0ffa2bf7",
                                f"{_ZPDESU}/train_content.json"),
    "zh_sms_10k_label.json": ("739583fe8df0cbb8d76326cb54441489c2cd514cdeb79933eaa99fd6fe363506",
                              f"{_ZPDESU}/train_label.json"),
}
_FEWCLUE = ("https://raw.githubusercontent.com/CLUEbenchmark/FewCLUE/"
            "62a02c6f31cf32814cfe522f78ef088228840f8d/datasets")
FEWCLUE = {  # task -> (source name in the tables, {file: sha256} in the order the files are read)
    "iflytek": ("zh FewCLUE iflytek (app descriptions)", {
        "train_few_all": "8de5db8d8a9fa77ae2e5da36a78c762625303600d547f96cc3b674a012243fe6",
        "dev_few_all": "25e8dd5031ce5d1f7f78f00edff81749a2dc00c17894151c2790c55a4ac3f5dc",
        "test_public": "f3cca532ec3d63b4afd2d8ce73f2f6e3eaa224cf8fa2fb9a6ebe2e602742dc19",
        "test": "d0fff6d2d2da33acd2705702db6e6703b3530e2b8195351c4a5f089a3ca814d1",
    }),
    "tnews": ("zh FewCLUE tnews (news titles)", {
        "train_few_all": "261c91076d36a2e64bad671719cbeccbfce8e7032716de4dbb495bccbb971c15",
        "dev_few_all": "8aa37d994fa6148e673c1357a44ee1409cab0220f773b55dd8e5733446804725",
        "test_public": "19909c69baee76687f0ffeb73b5eac642e77a32a8fe661325c6f9338ca9e4c99",
        "test": "9b082f61cea74c581a3c87aa6c3a05354a4323ddb242916a88a30fa27f6bcb86",
        "unlabeled": "8b3ecb742f611718fac1a0576cda84211052e94aa07669e2052c89d3bca6e506",
    }),
    "eprstmt": ("zh FewCLUE eprstmt (shop reviews)", {
        "train_few_all": "da6343ed63264304fdbf70ebc6f82d7ab43aa294daad047f450a88252a36de9d",
        "dev_few_all": "859eeb8b977a5e06c13b7c4016a74aae1dc8a5ff5a8fb502fba77e551087ed96",
        "test_public": "ddea92e833023adeff35070bd56331878ae9fdc57fd99229c249c2aae06bbf41",
        "test": "d93000f32207172f349ed3414db367930dd6e1b961991eca786de349aca55384",
        "unlabeled": "1bf7d22da37ff652f0ce58c5d69c14680e29008a290101fbac29befe06a6fdfe",
    }),
    "csldcp": ("zh FewCLUE csldcp (science abstracts)", {
        "train_few_all": "ca522b2f42fa3d7f564dfd70a057b81d12866b28a753d157ffb0c02855895429",
        "dev_few_all": "a291c071fccc3a88cc18b026862f38def0536e3666ea1b9ee84a473030d222a4",
        "test_public": "e1862a5529fc7531fd645944be8e7776e4ae154da53467df655768948561f8ec",
        "test": "5d7152df5441ee73cdd6e9e595513e54c05bf9e7c6939182ee2e3d4e74329742",
    }),
}
EXTRA_FILES.update({f"fewclue_{task}_{name}.json": (digest, f"{_FEWCLUE}/{task}/{name}.json")
                    for task, (_, files) in FEWCLUE.items() for name, digest in files.items()})


def labeled_sets(dirty: Path) -> dict[str, list[tuple[bool, str]]]:
    """name -> [(is_spam, text)] in file order."""
    sets: dict[str, list[tuple[bool, str]]] = {}
    with open(dirty / "zh_sms_labeled.tsv", encoding="utf-8", errors="replace") as f:
        sets["zh_sms_labeled"] = [(row[0] == "1", row[1]) for row in csv.reader(f, delimiter="\t", quoting=csv.QUOTE_NONE)
                                  if len(row) == 2]
    spam = (dirty / "zh_trec06c_spam.txt").read_text(encoding="utf-8", errors="replace").splitlines()
    ham = (dirty / "zh_trec06c_ham.txt").read_text(encoding="utf-8", errors="replace").splitlines()
    sets["zh_trec06c"] = [(True, t) for t in spam if t.strip()] + [(False, t) for t in ham if t.strip()]
    with open(dirty / "en_sms_spam_collection.tsv", encoding="utf-8", errors="replace") as f:
        rows = list(csv.reader(f, delimiter="\t", quoting=csv.QUOTE_NONE))[1:]
        sets["en_sms_spam_collection"] = [(row[0] == "spam", row[1]) for row in rows if len(row) == 2]
    return sets


def extra_file(extra: Path | None, name: str) -> Path | None:
    """DIR/name when it is there (checked against the published file: other bytes would be other figures)."""
    path = extra / name if extra else None
    if not (path and path.is_file()):
        return None
    digest, source = EXTRA_FILES[name]
    if hashlib.sha256(path.read_bytes()).hexdigest() != digest:
        raise SystemExit(f"{path} is not the file the benchmark's figures come from; save {source} there again")
    return path


def extra_labeled_sets(extra: Path | None, shared: dict[str, list[tuple[bool, str]]]) -> dict[str, "HeldOut"]:
    """Labeled sets found after the shared ones were tuned on, as name -> rows that repeat no shared row.

    zh_sms_10k: 10,000 messages of the same 800,000-message Chinese SMS collection as the shared zh_sms_labeled
    (RawData/train_content.json and train_label.json of ZPdesu/Spam-Message-Classifier-sklearn, commit
    c23407b9), a different sample: rows that copy a shared zh SMS row, exactly or nearly, are dropped and counted
    (those rows were read while tuning)."""
    content, labels = extra_file(extra, "zh_sms_10k_content.json"), extra_file(extra, "zh_sms_10k_label.json")
    if not (content and labels):
        return {}
    texts, marks = json.loads(content.read_text(encoding="utf-8")), json.loads(labels.read_text(encoding="utf-8"))
    if len(texts) != len(marks):
        raise SystemExit(f"{content} has {len(texts)} messages but {labels} {len(marks)} labels: save both files "
                         "from the same commit")
    rows = [(mark == "1", text) for text, mark in zip(texts, marks)]
    return {"zh_sms_10k": without_copies(rows, Copies(text for _, text in shared["zh_sms_labeled"]))}


def clean_corpora(corpora: Path, extra: Path | None) -> dict[str, list[tuple[str, str]]]:
    """Real text that is not spam, as source -> [(genre, text)]: what the rule removes here is collateral."""
    out: dict[str, list[tuple[str, str]]] = {}
    out["zh cnews (news)"] = [tuple(line.split("\t", 1)) for line in
                              (corpora / "zh" / "cnews.val.txt").read_text(encoding="utf-8").splitlines()]
    with open(corpora / "zh" / "ChnSentiCorp_htl_all.csv", encoding="utf-8") as f:
        out["zh ChnSentiCorp (hotel reviews)"] = [("positive" if r["label"] == "1" else "negative", r["review"])
                                                  for r in csv.DictReader(f) if r["review"]]
    out["zh wikipedia"] = [("article", json.loads(line)["text"]) for line in
                           (corpora / "zh" / "zhwiki_simplified_00.jsonl").read_text(encoding="utf-8").splitlines()]
    with open(corpora / "en" / "ag_news_test.csv", encoding="utf-8") as f:
        classes = {"1": "world", "2": "sports", "3": "business", "4": "sci/tech"}
        out["en ag_news"] = [(classes[row[0]], f"{row[1]}. {row[2]}") for row in csv.reader(f) if len(row) == 3]
    with gzip.open(corpora / "en" / "CC-MAIN-20190717121559-20190717143559-00140.jsonl.gz", "rt", encoding="utf-8") as f:
        out["en CC-MAIN (web pages)"] = [("page", json.loads(line)["text"]) for line in f]
    raw = (corpora / "en" / "wikitext2_test.raw").read_text(encoding="utf-8")
    out["en wikitext-2"] = [("paragraph", line) for line in raw.splitlines() if len(line) > 200]
    if extra:
        out.update(extra_corpora(extra))
    return out


def extra_corpora(extra: Path) -> dict[str, list[tuple[str, str]]]:
    """Clean Chinese genres from SophonPlus/ChineseNlpCorpus (EXTRA_FILES says where from)."""
    out = {}
    if waimai := extra_file(extra, "waimai_10k.csv"):
        with open(waimai, encoding="utf-8") as f:
            out["zh waimai_10k (delivery reviews)"] = [("positive" if r["label"] == "1" else "negative", r["review"])
                                                       for r in csv.DictReader(f) if r["review"]]
    if shopping := extra_file(extra, "online_shopping_10_cats.csv"):
        with open(shopping, encoding="utf-8") as f:
            out["zh online_shopping_10_cats (product reviews)"] = [(r["cat"], r["review"]) for r in csv.DictReader(f)
                                                                   if r["review"]]
    out.update(fewclue_corpora(extra))
    return out


def fewclue_corpora(extra: Path) -> dict[str, list[tuple[str, str]]]:
    """Clean Chinese text of four FewCLUE tasks (CLUEbenchmark/FewCLUE, commit 62a02c6f): app descriptions, news
    titles, shop reviews, science abstracts, as source -> [(genre, text)]; a row's genre is its task label, or
    'unlabeled' in the files without labels. A task is left out unless all its files are in DIR."""
    out = {}
    for task, (source, files) in FEWCLUE.items():
        paths = [extra_file(extra, f"fewclue_{task}_{name}.json") for name in files]
        if not all(paths):
            continue
        # one record a line, split on "\n" only: texts hold U+2028 and other characters splitlines() breaks at
        out[source] = [fewclue_row(json.loads(line)) for path in paths
                       for line in path.read_text(encoding="utf-8").split("\n") if line.strip()]
    return out


def fewclue_row(record: dict) -> tuple[str, str]:
    genre = record.get("label_des") or record.get("label_desc") or record.get("label") or "unlabeled"
    return str(genre), record.get("sentence") or record.get("content") or ""


def key(text: str) -> str:
    return " ".join(normalize_text(text)[0].lower().split())


@dataclass
class HeldOut:
    rows: list
    exact_copies: int    # same normalized text as a tune row or an earlier held-out row
    near_copies: int     # MinHash near-duplicates of one (Jaccard estimate >= NEAR_JACCARD)


class Copies:
    """Remembers texts and says whether a new one repeats one of them: the same normalized text, or a
    near-duplicate by the clean stage's MinHash LSH (Jaccard estimate >= NEAR_JACCARD)."""

    def __init__(self, texts=()):
        self.index = NearIndex(MinHasher(DedupConfig()))
        self.keys: set[str] = set()
        for text in texts:
            self.remember(text)

    def remember(self, text: str, sig=None) -> None:
        self.keys.add(key(text))
        self.index.add(sig if sig is not None else self.index.hasher.signature(text, channel_of(text)))

    def kind(self, text: str):
        """'exact', 'near' or None, and the text's signature (to remember it without hashing again)."""
        if key(text) in self.keys:
            return "exact", None
        sig = self.index.hasher.signature(text, channel_of(text))
        return ("near" if self.index.near(sig, NEAR_JACCARD) else None), sig


def without_copies(rows: list, copies: Copies, text_of=lambda r: r[1]) -> HeldOut:
    """rows that repeat none of copies' texts nor an earlier row; each kept row is remembered."""
    kept, exact, near = [], 0, 0
    for r in rows:
        kind, sig = copies.kind(text_of(r))
        if kind == "exact":
            exact += 1
        elif kind == "near":
            near += 1
        else:
            copies.remember(text_of(r), sig)
            kept.append(r)
    return HeldOut(kept, exact, near)


def split(rows: list, text_of=lambda r: r[1], dedup: bool = True) -> tuple[list, HeldOut]:
    """tune = even rows; held-out = odd rows without copies of tune rows or of each other."""
    tune, held = rows[0::2], rows[1::2]
    if not dedup:
        return tune, HeldOut(held, 0, 0)
    return tune, without_copies(held, Copies(text_of(r) for r in tune), text_of)


def channel_of(text: str) -> str:
    return detect_channel(DocFeatures(text)) if text.strip() else "other"


def wilson(hits: int, n: int, z: float = 1.96) -> tuple[float, float]:
    """95% Wilson score interval of a proportion, in percent."""
    if n == 0:
        return 0.0, 100.0
    p = hits / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return 100 * max(centre - half, 0.0), 100 * min(centre + half, 1.0)


def rate(hits: int, n: int) -> str:
    """'count  share% [95% interval]': the count, since a share of a small genre hides how few documents it is."""
    low, high = wilson(hits, n)
    return f"{hits:>5} {100 * hits / max(n, 1):5.1f}% [{low:4.1f}-{high:4.1f}]"
