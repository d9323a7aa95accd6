"""The README and docs/ stay a set of pages that point at each other correctly.

The README is what a newcomer reads first: its first commands are ``make demo``
and ``make test``, and the long text lives in docs/ pages it links to. Every
relative link in the README and docs/*.md must name a file of the checkout
and, with ``#anchor``, a heading of that page (as GitHub makes anchors); the
bundled configs and the benchmark scripts each keep their line in the page that
lists them.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from harness import ROOT

PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
# Pages another change of issue 20 is writing, linked already; drop each once it lands.
BEING_WRITTEN: set[Path] = set()


def _prose(path: Path) -> str:
    """The page without its fenced code blocks, where brackets are code, not links."""
    return re.sub(r"```.*?```", "", path.read_text(), flags=re.S)


def _anchors(path: Path) -> set[str]:
    """The anchors GitHub gives the headings of ``path``: lower case, punctuation dropped, spaces as hyphens."""
    anchors: set[str] = set()
    seen: dict[str, int] = {}
    for heading in re.findall(r"^#{1,6} (.*)$", _prose(path), re.M):
        slug = re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")
        count = seen.get(slug, 0)
        seen[slug] = count + 1
        anchors.add(slug if count == 0 else f"{slug}-{count}")
    return anchors


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_names_a_file_and_a_heading_that_exist(page):
    broken = []
    for target in re.findall(r"\]\(([^)\s]+)\)", _prose(page)):
        if re.match(r"[a-z]+:", target):
            continue
        name, _, anchor = target.partition("#")
        dest = (page.parent / name).resolve() if name else page
        if not dest.exists():
            if dest not in BEING_WRITTEN:
                broken.append(f"{target}: no such file")
        elif anchor and dest.suffix == ".md" and anchor not in _anchors(dest):
            broken.append(f"{target}: no such heading in {dest.relative_to(ROOT)}")
    assert not broken, f"{page.relative_to(ROOT)} links to what is not there: {broken}"


def test_the_readme_starts_with_make_demo_and_make_test():
    first_block = re.search(r"```bash\n(.*?)```", (ROOT / "README.md").read_text(), re.S).group(1)
    assert [line.split()[:2] for line in first_block.splitlines()] == [["make", "demo"], ["make", "test"]]


def test_every_bundled_config_and_benchmark_has_its_line_in_the_docs():
    cli = (ROOT / "docs" / "CLI.md").read_text()
    missing = [p.name for p in (ROOT / "configs").glob("*.yaml") if f"`{p.name}`" not in cli]
    assert not missing, f"docs/CLI.md does not list these configs: {missing}"
    benchmarks = (ROOT / "docs" / "BENCHMARKS.md").read_text()
    missing = [p.name for p in (ROOT / "benchmarks").glob("*.py")
               if not p.name.startswith("_") and f"benchmarks/{p.name}" not in benchmarks]
    assert not missing, f"docs/BENCHMARKS.md does not list these scripts: {missing}"
