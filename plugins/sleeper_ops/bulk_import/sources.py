"""The input files of a bulk import: files, directories or globs, local or ``s3://``.

:func:`expand_sources` turns what the user gave into a sorted list of files with their
sizes, refusing the whole import (naming every problem) when a source matches nothing,
is not a supported format or cannot be read; :func:`find_inputs` reports the same
problems without raising (a dated import waiting for its input asks it).
"""

from __future__ import annotations

import fnmatch
import glob
import os
from typing import Optional, Sequence

import pyarrow.fs as pafs

from sleeper_ops.errors import IngestError
from sleeper_ops.io.inputs import FORMATS, detect_format, resolve
from sleeper_ops.io.storage import S3Options

_GLOB_CHARS = set("*?[")


def _is_input(path: str) -> bool:
    return os.path.splitext(path)[1].lower() in FORMATS


def _expand_local(source: str) -> list[tuple[str, int]]:
    if _GLOB_CHARS & set(source):
        paths = sorted(glob.glob(source, recursive=True))
    elif os.path.isdir(source):
        paths = sorted(os.path.join(d, f) for d, _, fs in os.walk(source) for f in fs)
        paths = [p for p in paths if _is_input(p)]
    else:
        paths = [source]
    out = []
    for p in paths:
        if os.path.isfile(p):
            out.append((os.path.abspath(p), os.path.getsize(p)))
    return out


def _expand_s3(source: str, s3: Optional[S3Options]) -> list[tuple[str, int]]:
    fs, path = resolve(source, s3)
    pattern = None
    if _GLOB_CHARS & set(path):
        cut = min(path.index(c) for c in _GLOB_CHARS if c in path)
        base = path[:cut].rsplit("/", 1)[0]
        pattern, path = source[len("s3://"):], base
    info = fs.get_file_info(path.rstrip("/"))
    if info.type == pafs.FileType.File and pattern is None:
        return [(source, info.size or 0)]
    if info.type != pafs.FileType.Directory:
        return []
    found = fs.get_file_info(pafs.FileSelector(path.rstrip("/"), recursive=True, allow_not_found=True))
    out = []
    for f in found:
        if f.type != pafs.FileType.File or not _is_input(f.path):
            continue
        if pattern is not None and not fnmatch.fnmatchcase(f.path, pattern):
            continue
        out.append((f"s3://{f.path}", f.size or 0))
    return sorted(out)


def absolute_sources(sources: Sequence[str]) -> list[str]:
    """``sources`` with every local path (anything but a ``scheme://`` URI) made absolute
    against this process's working directory, so a runner in another process or on
    another machine (the Spark service) reads the files the caller named. The import
    key's digest (:func:`~sleeper_ops.bulk_import.job.import_digest`) reads them alike."""
    return [s if "://" in s else os.path.abspath(s) for s in sources]


def expand_sources(sources: Sequence[str], s3: Optional[S3Options] = None) -> list[tuple[str, int]]:
    """Every input file the ``sources`` name, once each, sorted, with its size in bytes.

    Raises:
        IngestError: no sources, or a source that names no input file, or a file of an
            unknown type (all problems named in one message).
    """
    if not sources:
        raise IngestError("no sources given to import")
    files, problems = find_inputs(sources, s3)
    if problems:
        raise IngestError("nothing imported: " + "; ".join(problems))
    return files


def find_inputs(sources: Sequence[str], s3: Optional[S3Options] = None) -> tuple[list[tuple[str, int]], list[str]]:
    """The input files the ``sources`` name (as :func:`expand_sources`), and one line per
    problem: a source that names no input file, cannot be listed, or a file of an
    unknown type. No sources at all is a problem too."""
    if not sources:
        return [], ["no sources given to import"]
    problems: list[str] = []
    files: dict[str, int] = {}
    for source in sources:
        try:
            found = _expand_s3(source, s3) if source.startswith("s3://") else _expand_local(source)
        except OSError as e:
            problems.append(f"{source}: cannot be listed: {e}")
            continue
        if not found:
            problems.append(f"{source}: no input files (.parquet, .csv or .jsonl) found")
        for path, size in found:
            try:
                detect_format(path)
            except IngestError as e:
                problems.append(str(e))
                continue
            files[path] = size
    return sorted(files.items()), problems


def pack_files(files: Sequence[str], sizes: Sequence[int], packs: int) -> list[list[str]]:
    """``files`` packed into at most ``packs`` lists of about equal total size (largest
    file first into the lightest pack), the heaviest pack first; no pack is empty.
    ``sizes`` gives each file's bytes (empty: all equal)."""
    if not files:
        return []
    weights = list(sizes) if sizes else [1] * len(files)
    if len(weights) != len(files):
        raise ValueError(f"{len(files)} files but {len(weights)} sizes")
    n = max(1, min(packs, len(files)))
    loads = [0] * n
    members: list[list[str]] = [[] for _ in range(n)]
    for f, w in sorted(zip(files, weights), key=lambda fw: (-fw[1], fw[0])):
        lightest = min(range(n), key=lambda i: (loads[i], i))
        loads[lightest] += max(1, w)
        members[lightest].append(f)
    return [members[i] for i in sorted(range(n), key=lambda i: (-loads[i], i))]
