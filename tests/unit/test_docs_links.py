"""The README and the task pages under docs/ link only to files that exist inside the
repository, and every task page is reachable from the docs index."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PAGES = [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]
LINK = re.compile(r"\]\(([^)\s]+)\)")
# a relative path written as code, e.g. `../elsewhere/FILE.md`: a reader follows it like a link
CODE_PATH = re.compile(r"`(\.\.?/[^`\s]+)`")


def test_every_relative_link_names_an_existing_file():
    broken = []
    for page in PAGES:
        for target in LINK.findall(page.read_text()):
            if re.match(r"[a-z]+://", target) or target.startswith("#"):
                continue
            path = (page.parent / target.split("#", 1)[0]).resolve()
            if not path.exists():
                broken.append(f"{page.relative_to(REPO)} -> {target}")
    assert broken == []


def test_no_relative_link_or_path_leaves_the_repository():
    outside = []
    for page in PAGES:
        text = page.read_text()
        for target in [*LINK.findall(text), *CODE_PATH.findall(text)]:
            if re.match(r"[a-z]+://", target) or target.startswith("#"):
                continue
            path = (page.parent / target.split("#", 1)[0]).resolve()
            if not path.is_relative_to(REPO):
                outside.append(f"{page.relative_to(REPO)} -> {target}")
    assert outside == []


def test_every_task_page_is_in_the_docs_index():
    index = (REPO / "docs" / "README.md").read_text()
    for folder in ("usage", "operations"):
        for page in sorted((REPO / "docs" / folder).glob("*.md")):
            assert f"{folder}/{page.name}" in index, f"{folder}/{page.name} is not linked from docs/README.md"


def test_the_readme_stays_a_front_door():
    assert len((REPO / "README.md").read_text().splitlines()) <= 120
