"""The Markdown pages hold together: links land, named files exist, docs/README.md lists every
page, and no page narrates when or in which session something changed. The research notes beside
the benchmark reports count as pages."""

from __future__ import annotations

import re

import pytest

from tests.conftest import REPO

# The research beside the benchmark reports (bench/results/<folder>/README.md) is held to the same.
PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md")),
         *sorted((REPO / "bench" / "results").glob("*/README.md"))]
LINK = re.compile(r"\]\(([^)#\s]+)?(#[^)\s]*)?\)")
REPO_PATH = re.compile(r"`((?:bench|tests|engine|server|compat|corpus|deploy|docs)/[\w./-]+\.(?:py|md|sh|yaml|json|jsonl))`")
# Words that date a statement instead of saying how things are.
NARRATION = re.compile(r"\bsession \d|\bissue #?\d+\b(?!\.\d)|\bround \d|\bticket\b|\bno longer\b|\bused to\b|\bpreviously\b"
                       r"|\bwas changed\b|\bbefore (?:this|the) change\b", re.I)


def _anchors(text: str) -> set[str]:
    """GitHub's anchors for a page's headings."""
    headings = re.findall(r"^#+ (.+)$", re.sub(r"^```.*?^```", "", text, flags=re.S | re.M), re.M)
    return {"#" + re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-") for h in headings}


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.relative_to(REPO).as_posix())
def test_links_land(page):
    text = page.read_text(encoding="utf-8")
    for target, anchor in LINK.findall(text):
        if target.startswith(("http://", "https://")):
            continue
        path = (page.parent / target).resolve() if target else page
        assert path.exists(), f"{page.name} links to {target}, which does not exist"
        if anchor and path.suffix == ".md":
            assert anchor in _anchors(path.read_text(encoding="utf-8")), f"{page.name}: no heading for {target}{anchor}"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.relative_to(REPO).as_posix())
def test_named_files_exist(page):
    missing = [p for p in REPO_PATH.findall(page.read_text(encoding="utf-8")) if not (REPO / p).exists()]
    assert not missing, f"{page.name} names files that do not exist: {missing}"


def test_docs_index_lists_every_page():
    index = (REPO / "docs" / "README.md").read_text(encoding="utf-8")
    listed = set(re.findall(r"\]\(([\w-]+\.md)\)", index))
    pages = {p.name for p in PAGES if p.parent.name == "docs" and p.name != "README.md"}
    assert pages <= listed, f"docs/README.md does not list {sorted(pages - listed)}"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.relative_to(REPO).as_posix())
def test_no_narration(page):
    lines = [f"{n}: {line}" for n, line in enumerate(page.read_text(encoding="utf-8").splitlines(), 1)
             if NARRATION.search(line)]
    assert not lines, f"{page.name} says when things changed instead of how they are:\n" + "\n".join(lines)
