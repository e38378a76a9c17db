"""What a file's first bytes say it is, for errors that tell users what they gave by mistake.

Shared by parse (expects SQLite) and prof (expects JSON Lines); never imports more than this.
"""
from __future__ import annotations

from typing import Optional

SQLITE = b"SQLite format 3\x00"

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
