"""Wording shared by the tools' messages."""
from __future__ import annotations


def count(n: int, noun: str) -> str:
    """`1 kernel`, `2 kernels`, `0 kernels`: a number with its noun in the right number.
    `noun` is the singular; the last word takes an `s` (`malformed marker` -> `malformed markers`)."""
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"
