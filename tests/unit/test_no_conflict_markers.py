"""No tracked file holds a merge conflict's markers (one was once committed into a docs page)."""

from __future__ import annotations

import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_no_tracked_text_file_holds_merge_conflict_markers() -> None:
    names = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout.split()
    found = []
    for name in names:
        path = ROOT / name
        if not path.is_file() or path.suffix in {".png", ".jar", ".parquet", ".gz", ".whl"}:
            continue
        try:
            text = path.read_text()
        except UnicodeDecodeError:
            continue
        found += [f"{name}:{i}" for i, line in enumerate(text.splitlines(), 1)
                  if line.startswith(("<<<<<<< ", ">>>>>>> "))]
    assert not found, f"merge conflict markers in: {', '.join(found[:10])}"
