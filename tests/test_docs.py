"""The documentation's links lead somewhere: every relative link of the README, docs/ and benchmarks/README.md
names a file or folder of the checkout, and every page under docs/ is reachable from the docs index."""
from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def pages() -> list[Path]:
    return [ROOT / "README.md", ROOT / "benchmarks" / "README.md", *sorted((ROOT / "docs").glob("*.md")),
            *sorted((ROOT / "benchmarks" / "results").glob("*.md"))]


def relative_links(page: Path) -> list[str]:
    targets = LINK.findall(page.read_text(encoding="utf-8"))
    return [t.split("#")[0] for t in targets if not re.match(r"[a-z]+:", t) and t.split("#")[0]]


def test_every_relative_link_in_the_docs_names_a_path_of_the_checkout():
    broken = [f"{page.relative_to(ROOT)} -> {target}" for page in pages() for target in relative_links(page)
              if not (page.parent / target).exists()]
    assert not broken, broken
    assert sum(len(relative_links(p)) for p in pages()) > 30  # the pages do link to each other


def test_the_docs_index_links_every_page_and_the_readme_links_the_index():
    index = set(relative_links(ROOT / "docs" / "README.md"))
    unlisted = [p.name for p in (ROOT / "docs").glob("*.md") if p.name != "README.md" and p.name not in index]
    assert not unlisted, f"docs/README.md does not list {unlisted}"
    assert "docs/README.md" in relative_links(ROOT / "README.md")


def test_the_readme_stays_a_front_door():
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    lines = text.count("\n")
    assert lines <= 230, f"README.md has {lines} lines: move detail to docs/"
    cluster_path = text.index("prefect deployment run pretrain/full")
    assert text.count("\n", 0, cluster_path) < 90  # the cluster path is on the first screens
