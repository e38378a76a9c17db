"""torch.distributed collectives in the op table: their work is communication, measured by the
collective columns (coll, collbytes, ranks, algbw, busbw: collectives.py), not in FLOPs or memory
bytes, so FLOPs and bytes are unknown (na) and `params` says what moved."""
from __future__ import annotations


from ...comms.collectives import TABLE, from_marker
from ..registry import Call, Cost, register
from ..values import short


def _collective(c: Call) -> Cost | None:
    coll = from_marker(c.marker)
    if coll is None:
        return None
    params = f"coll={coll.kind},bytes={'na' if coll.size is None else coll.size}," \
             f"ranks={'na' if coll.ranks is None else coll.ranks},type={short(coll.dtype)}"
    return Cost(None, None, params, coll.dtype)


register(*(f"torch.distributed.{name}" for name in TABLE))(_collective)
