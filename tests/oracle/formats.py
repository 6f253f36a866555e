"""What the erasure oracle's raw scan (tests/oracle/raw_scan.py) knows of formats, written
without the product's code: a needle's byte forms (UTF-8, JSON-escaped, hex, UTF-16,
base64 at each alignment), and decoders that turn a byte string into what it holds
(zlib, gzip and zstd frames; Parquet row groups and Arrow IPC batches; JSON and JSON
Lines), each answering None for bytes that are not theirs."""

from __future__ import annotations

import base64
import gzip
import io
import json
import re
import zlib
from typing import Any, Iterable, Iterator, Optional

import pyarrow as pa
import pyarrow.parquet as pq

try:
    import zstandard
except ImportError:  # pragma: no cover - installed with the project's constraints
    zstandard = None


# ----- needles ---------------------------------------------------------------------------
def _base64_forms(data: bytes) -> set[bytes]:
    """The parts of ``data``'s base64 that are the same wherever it sits in a longer
    string (one per alignment), standard and URL-safe alphabets."""
    forms: set[bytes] = set()
    for pad in range(3):
        enc = base64.b64encode(b"\x00" * pad + data)
        start = (pad * 4 + 2) // 3  # characters touched by the padding bytes
        end = len(enc) - (4 if (pad + len(data)) % 3 else 0)
        core = enc[start:end].rstrip(b"=")
        if len(core) >= 8:
            forms.add(core)
            forms.add(core.replace(b"+", b"-").replace(b"/", b"_"))
    return forms


class Needles:
    """The byte forms of each needle; ``search(data)`` names the needles ``data`` holds."""

    def __init__(self, needles: Iterable[str | bytes]) -> None:
        self.forms: dict[bytes, str] = {}
        for n in needles:
            raw = n.encode() if isinstance(n, str) else bytes(n)
            label = n if isinstance(n, str) else "b64:" + base64.b64encode(n).decode()
            variants = {raw, raw.hex().encode(), *_base64_forms(raw)}
            if isinstance(n, str):
                variants.add(json.dumps(n)[1:-1].encode())
                variants.add(n.encode("utf-16-le"))
            for v in variants:
                if v:
                    self.forms[v] = label
        self._first = re.compile(b"|".join(re.escape(f) for f in sorted(self.forms, key=len, reverse=True)))

    def search(self, data: bytes | bytearray | memoryview) -> set[str]:
        if not self.forms:
            return set()
        return {self.forms[m.group(0)] for m in self._first.finditer(bytes(data))}

    def search_text(self, text: str) -> set[str]:
        return self.search(text.encode("utf-8", "surrogatepass"))


# ----- decoding -------------------------------------------------------------------------
def decompress(data: bytes) -> Optional[tuple[str, bytes]]:
    if data[:4] == b"\x28\xb5\x2f\xfd" and zstandard is not None:
        try:
            return "zstd", zstandard.ZstdDecompressor().decompressobj().decompress(data)
        except zstandard.ZstdError:
            return None
    if data[:2] == b"\x1f\x8b":
        try:
            return "gzip", gzip.decompress(data)
        except (OSError, EOFError):
            return None
    if len(data) >= 2 and data[0] & 0x0F == 8 and (data[0] << 8 | data[1]) % 31 == 0:
        try:
            return "zlib", zlib.decompressobj().decompress(data)
        except zlib.error:
            return None
    return None


def arrow_tables(data: bytes) -> Optional[tuple[str, list[tuple[str, pa.Table]]]]:
    """``data`` read as Parquet (one table per row group) or Arrow IPC (file or stream)."""
    if data[:4] == b"PAR1" and data[-4:] == b"PAR1":
        try:
            f = pq.ParquetFile(io.BytesIO(data))
            return "parquet", [(f"rg {i}", f.read_row_group(i)) for i in range(f.num_row_groups)]
        except (pa.ArrowException, OSError):
            return None
    if data[:6] == b"ARROW1":
        try:
            r = pa.ipc.open_file(pa.py_buffer(data))
            return "arrow-file", [(f"batch {i}", pa.Table.from_batches([r.get_batch(i)]))
                                  for i in range(r.num_record_batches)]
        except (pa.ArrowException, OSError):
            return None
    if data[:4] == b"\xff\xff\xff\xff":
        try:
            return "arrow-stream", [("", pa.ipc.open_stream(pa.py_buffer(data)).read_all())]
        except (pa.ArrowException, OSError):
            return None
    return None


def flatten(value: Any) -> Iterator[Any]:
    """Every leaf of a Python value (dicts: keys and values; lists; tuples)."""
    if isinstance(value, dict):
        for k, v in value.items():
            yield k
            yield from flatten(v)
    elif isinstance(value, (list, tuple)):
        for v in value:
            yield from flatten(v)
    else:
        yield value



def as_json(data: bytes) -> Optional[Any]:
    """``data`` as one JSON document or JSON Lines, else None."""
    if data.lstrip()[:1] not in (b"{", b"["):
        return None
    try:
        return json.loads(data)
    except ValueError:
        return _json_lines(data)


def _json_lines(data: bytes) -> Optional[list[Any]]:
    """JSON Lines (every non-empty line a JSON document), else None."""
    lines = [line for line in data.splitlines() if line.strip()]
    if not lines or not lines[0].lstrip().startswith((b"{", b"[")):
        return None
    try:
        return [json.loads(line) for line in lines]
    except ValueError:
        return None
