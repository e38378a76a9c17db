"""What a file's first bytes say it is, for errors that tell users what they gave by mistake.

Shared by parse (expects SQLite) and prof (expects JSON Lines); never imports more than this.
"""
from __future__ import annotations

from typing import Optional

SQLITE = b"SQLite format 3\x00"
PARQUET = b"PAR1"  # a Parquet file's first (and last) four bytes

_COMPRESSED = ((b"\x1f\x8b", "gzip"), (b"\xfd7zXZ\x00", "xz"), (b"(\xb5/\xfd", "zstd"), (b"BZh", "bzip2"),
               (b"PK\x03\x04", "zip"))


def compression(head: bytes) -> Optional[str]:
    """The compressor whose magic number `head` starts with (gzip, xz, zstd, bzip2, zip), or None."""
    for magic, name in _COMPRESSED:
        if head.startswith(magic):
            return name
    return None


def file_compression(path: str) -> Optional[str]:
    """compression() of the file at `path`; None when it cannot be read."""
    try:
        with open(path, "rb") as f:
            return compression(f.read(8))
    except OSError:
        return None


# Keys only a Chrome trace (torch.profiler's export_chrome_trace, Kineto, what HTA reads) has at its top.
_CHROME_KEYS = (b'"traceEvents"', b'"schemaVersion"', b'"deviceProperties"', b'"displayTimeUnit"')


def foreign_text(head: bytes) -> Optional[str]:
    """What another tool's text file is, from its first bytes (its first lines): a torch.profiler
    (Chrome) trace or a CSV table; None when it looks like neither."""
    if head.lstrip()[:1] in (b"{", b"[") and any(k in head for k in _CHROME_KEYS):
        return "a torch.profiler / Chrome trace (JSON with traceEvents, what HTA reads)"
    first = head.split(b"\n", 1)[0].strip()
    if first.count(b",") >= 2 and not first.startswith((b"{", b"[")):
        return "a CSV table (prof's --csv, nsys stats' or HTA's)"
    return None
