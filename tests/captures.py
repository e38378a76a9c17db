"""The shipped captures are xz-compressed SQLite exports: unpacked into a test's own folder."""
from __future__ import annotations

import lzma
import shutil
from pathlib import Path


def unpacked(src: Path, folder: Path) -> Path:
    """`src` (`name.xz`) decompressed to `folder/name`; that path."""
    out = folder / src.name[: -len(".xz")]
    with lzma.open(src) as packed, open(out, "wb") as dst:
        shutil.copyfileobj(packed, dst)
    return out
