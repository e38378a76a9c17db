"""A Parquet record store analysed column-wise: each record's memo inputs (memo.py) are computed
from Arrow columns, a dict is built only for a record whose content is new in its call prefix.

Only the fields an analysis or a view reads are read (projection pushdown: not correlationId,
seqId, altSeqId, launch). A record's content key combines dictionary codes of those columns, but
for the times and the volatile ids: in torchOps every range's `opId`, `seq` and `inputOpIds`, in
fwd its `seq` and `call`. Those are cut out of the JSON text by regular expressions anchored to
an object key (a `{` or `,` then `"key":` never occurs inside a JSON string), so that the
skeleton and the ids taken out, in order, give back the text exactly. Each distinct skeleton is
decoded once to learn which id is which range's and to check the memo's assumptions.
"""
from __future__ import annotations

import re
from typing import Any, Iterator

import numpy as np

from ..store import read as store
from ..store.schema import EXTRA, FIELDS, KEYS, loads
from .aten import lookup_aten
from .memo import Memo, NotMemoizable

UNREAD = ("correlationId", "seqId", "altSeqId", "launch")  # read by no analysis and no summary
FIELDS_READ = [f for f in FIELDS if f not in UNREAD]
TIMES = ("kStart", "kEnd", "kDuration")
STATIC = [f for f in FIELDS_READ if f not in TIMES + ("fwd", "torchOps")]
BATCH = 65536
_VOLATILE = ("opId", "seq", "inputOpIds")
_RANGE_IDS = r'([{,]"(?:opId|seq)":)-?\d+'
_RANGE_LISTS = r'([{,]"inputOpIds":)\[[\[\],\d-]*\]'
_SPLIT = r'[{,]"(?:opId|seq|inputOpIds)":'
_VALUE = r'^(?P<v>-?\d+|\[[\[\],\d-]*\])'
_FWD_SEQ, _FWD_CALL = r'^\{"seq":(-?\d+)', r',"call":(-?\d+)\}$'
_MARK = "pyprof-volatile"
_HOLE = re.compile(r'([{,]"(?:opId|seq|inputOpIds|call)":)#')
_MINUS_ZERO = r'[:,\[]-0[,\]}]'  # -0 == 0 but not as text
_SEP = "\x1f"


def _freeze(v: Any) -> Any:
    """A hashable value equal to another exactly when the JSON values are (==)."""
    if isinstance(v, dict):
        return frozenset((k, _freeze(x)) for k, x in v.items())
    if isinstance(v, list):
        return tuple(_freeze(x) for x in v)
    if isinstance(v, float) and v != v:
        raise NotMemoizable("NaN in a JSON field (NaN != NaN)")
    return v


def _plain(v: Any) -> bool:
    """No float or bool inside (1.0 == 1 == True, but not as text)."""
    if isinstance(v, (float, bool)):
        return False
    return all(_plain(x) for x in v) if isinstance(v, (list, tuple)) else True


class Inputs:
    """Per-batch memo inputs of a store's records, with the caches that span batches."""

    def __init__(self) -> None:
        self._static: dict = {}
        self._skeletons: dict = {}
        self._frozen: dict = {}
        self.memo = Memo(lambda where: store.record_at(where[0], where[1], FIELDS_READ, where[2]))

    def run(self, path: str) -> Iterator[tuple[Any, np.ndarray, np.ndarray]]:
        """Per batch: (batch, node per record, call number per record (0: no kernel))."""
        for rank, batch in store.batches(path, FIELDS_READ, BATCH):
            yield batch, *self._batch(batch, rank)

    def _batch(self, batch: Any, rank: int | None) -> tuple[np.ndarray, np.ndarray]:
        import pyarrow.compute as pc

        n = batch.num_rows
        if batch.column(EXTRA).null_count < n:
            raise NotMemoizable("a value held outside its column (_extra)")
        for name in TIMES:
            if batch.column(name).null_count:
                raise NotMemoizable(f"a record without {name}")
        if batch.column("compiled").null_count < n:
            raise NotMemoizable("kernels of compiled graphs")
        statics = self._statics(batch, rank)
        kinds = batch.column("kind")
        if kinds.null_count:
            raise NotMemoizable("a record without kind")
        kernel = pc.equal(kinds, "kernel").to_numpy(zero_copy_only=False)
        bprop = pc.fill_null(pc.equal(batch.column("dir"), "bprop"), False).to_numpy(zero_copy_only=False)
        sub0 = pc.fill_null(pc.equal(batch.column("subSeqId"), 0), False).to_numpy(zero_copy_only=False)
        threads = self._values(batch, ("pid", "tid"))
        ranges, rcode = self._ranges(batch.column("torchOps"))
        fwds, fcode = self._fwds(batch.column("fwd"))
        markers, mcode = self._markers(batch.column("marker"))
        nodes = np.empty(n, np.int32)
        numbers = np.zeros(n, np.int64)
        memo = self.memo
        for i, (k, s, th, b, z, r, f, m) in enumerate(zip(kernel.tolist(), statics, threads, bprop.tolist(),
                                                           sub0.tolist(), rcode, fcode, mcode)):
            where = (batch, i, rank)
            if not k:
                nodes[i] = memo.copy(s, where)
                continue
            rskel, rvol, opids, outer = ranges[r]
            fskel, fvol, call, seq = fwds[f]
            if b and call is not None:  # calls.identity
                ident, starts = ("call", call), False
            else:
                ident, starts = ((seq if b else markers[m]), outer), outer is None and z
            nodes[i], numbers[i] = memo.kernel(th, ident, starts, starts and not b, (s, rskel, fskel), rvol + fvol,
                                               opids, where)
        return nodes, numbers

    def _codes(self, column: Any) -> np.ndarray:
        import pyarrow as pa
        import pyarrow.compute as pc

        t = column.type
        if pa.types.is_struct(t):
            parts = [column.is_null()] + [column.field(i) for i in range(t.num_fields)]
            return self._combine([self._codes(p) for p in parts])
        if pa.types.is_list(t):
            if pa.types.is_string(t.value_type) and pc.any(pc.match_substring(pc.list_flatten(column), _SEP)).as_py():
                raise NotMemoizable("a list item holding the separator")
            text = pc.binary_join(pc.cast(column, pa.list_(pa.string())), _SEP)
            return self._combine([self._codes(text), self._codes(pc.fill_null(pc.list_value_length(column), -1))])
        if pa.types.is_dictionary(t):
            return column.indices.to_numpy(zero_copy_only=False)
        return pc.dictionary_encode(column, null_encoding="encode").indices.to_numpy(zero_copy_only=False)

    @staticmethod
    def _combine(codes: list) -> np.ndarray:
        acc = np.zeros(len(codes[0]), np.int64)
        for c in codes:
            card = int(c.max()) + 1 if len(c) else 1
            if len(acc) and int(acc.max()) >= (1 << 62) // card:
                acc = np.unique(acc, return_inverse=True)[1].astype(np.int64)
            acc = acc * card + c
        return np.unique(acc, return_inverse=True)[1].reshape(-1)

    def _values(self, batch: Any, names: tuple) -> list:
        """Per record, the tuple of its values of columns `names` (one object per distinct tuple)."""
        codes = self._combine([self._codes(batch.column(name)) for name in names])
        _, first = np.unique(codes, return_index=True)
        reps = list(zip(*[batch.column(name).take(first).to_pylist() for name in names]))
        return [reps[c] for c in codes.tolist()]

    def _statics(self, batch: Any, rank: int | None) -> list:
        """Per record, a number naming its content but for the times, fwd and torchOps."""
        names = (*STATIC, KEYS)
        codes = self._combine([self._codes(batch.column(name)) for name in names])
        uniq, first = np.unique(codes, return_index=True)
        cols = []
        for name in names:
            col = batch.column(name).take(first)
            cols.append(col.cast(col.type.value_type) if name == KEYS else col)
        ids = []
        for values in zip(*[c.to_pylist() for c in cols]):
            key = (rank, *[tuple(v.items()) if isinstance(v, dict) else tuple(v) if isinstance(v, list) else v
                           for v in values])
            ids.append(self._static.setdefault(key, len(self._static)))
        return [ids[c] for c in codes.tolist()]

    def _markers(self, column: Any) -> tuple[list, list]:
        """The markers as call identities use them (equal when ==), and each record's index."""
        import pyarrow.compute as pc

        enc = pc.dictionary_encode(column, null_encoding="encode")
        out = [None if t is None else self._intern(_freeze(loads(t))) for t in enc.dictionary.to_pylist()]
        return out, enc.indices.to_numpy(zero_copy_only=False).tolist()

    def _intern(self, v: Any) -> Any:
        return self._frozen.setdefault(v, v)

    def _ranges(self, column: Any) -> tuple[list, list]:
        """Per distinct torchOps text: (skeleton, volatile ids, the (name, opId) of the ranges a
        range state may hold, the outer range as an identity compares it); each record's index."""
        import pyarrow.compute as pc

        enc = pc.dictionary_encode(column, null_encoding="encode")
        texts = enc.dictionary
        if pc.any(pc.match_substring_regex(texts, _MINUS_ZERO)).as_py():
            raise NotMemoizable("-0 in torchOps")
        skel = pc.replace_substring_regex(pc.replace_substring_regex(texts, _RANGE_IDS, r"\1#"), _RANGE_LISTS, r"\1#")
        pieces = pc.list_slice(pc.split_pattern_regex(texts, _SPLIT), 1)
        flat = pc.struct_field(pc.extract_regex(pc.list_flatten(pieces), _VALUE), [0])
        offsets = pieces.offsets.to_numpy()
        values = flat.to_pylist()
        out = []
        for j, s in enumerate(skel.to_pylist()):
            if s is None:
                out.append((None, (), (), None))
                continue
            vol = tuple([v for v in values[offsets[j]:offsets[j + 1]] if v is not None])
            sid, outer_at, opid_at, outer_skel, holes = self._shape(s, "torchOps")
            if len(vol) != len(holes):
                raise NotMemoizable("torchOps ids not where their keys are")
            outer = None if outer_skel is None else (outer_skel, frozenset([(holes[p], vol[p]) for p in outer_at]))
            out.append((sid, vol, tuple([(name, int(vol[p])) for p, name in opid_at]), outer))
        return out, enc.indices.to_numpy(zero_copy_only=False).tolist()

    def _shape(self, skel: str, field: str) -> tuple:
        """What a skeleton says, decoded once: (its id, positions of the outer range's ids, of the
        opIds of the ranges a range state may hold with their names, the outer range without its
        ids (None: no range), the key of each id)."""
        got = self._skeletons.get((field, skel))
        if got is not None:
            return got
        if _MARK in skel:
            raise NotMemoizable(f"{field} text holding {_MARK}")
        value = loads(_HOLE.sub(rf'\g<1>"{_MARK}"', skel))
        holes: list = []
        if field == "fwd":
            if value is not None and not isinstance(value, dict):
                raise NotMemoizable("fwd is no object")
            got = (len(self._skeletons), value)
        else:
            got = self._range_shape(value, holes)
            got = (len(self._skeletons), *got, holes)
        self._skeletons[(field, skel)] = got
        return got

    @staticmethod
    def _range_shape(ops: Any, holes: list) -> tuple:
        if not isinstance(ops, list):
            raise NotMemoizable("torchOps is no list")
        outer_at, opid_at = [], []
        for depth, r in enumerate(ops):
            if not isinstance(r, dict) or any(isinstance(v, dict) for v in r.values()):
                raise NotMemoizable("a torchOps range that is no flat object")
            for k, v in r.items():
                if v == _MARK:
                    if depth == 0:
                        outer_at.append(len(holes))
                    if k == "opId" and (depth == len(ops) - 1 or lookup_aten(r.get("name")) is not None):
                        opid_at.append((len(holes), r.get("name")))
                    holes.append(k)
                elif k in _VOLATILE and not (v is None or isinstance(v, str) or _plain(v)):
                    raise NotMemoizable("a torchOps id that is no integer")
            if r.get("opId") != _MARK and (depth == len(ops) - 1 or lookup_aten(r.get("name")) is not None):
                raise NotMemoizable("a PyTorch range a range state may hold without an integer opId")
        outer = None
        if ops:
            outer = _freeze({k: (None if v == _MARK else v) for k, v in ops[0].items()})
        return outer_at, opid_at, outer

    def _fwds(self, column: Any) -> tuple[list, list]:
        """Per distinct fwd text: (skeleton, volatile ids, call, seq); each record's index."""
        import pyarrow.compute as pc

        enc = pc.dictionary_encode(column, null_encoding="encode")
        texts = enc.dictionary
        skel = pc.replace_substring_regex(pc.replace_substring_regex(texts, _FWD_SEQ, '{"seq":#'),
                                          _FWD_CALL, ',"call":#}')
        seqs = pc.struct_field(pc.extract_regex(texts, r'^\{"seq":(?P<v>-?\d+)'), [0]).to_pylist()
        calls = pc.struct_field(pc.extract_regex(texts, r',"call":(?P<v>-?\d+)\}$'), [0]).to_pylist()
        out = []
        for s, seq, call in zip(skel.to_pylist(), seqs, calls):
            if s is None:
                out.append((None, (), None, None))
                continue
            sid, value = self._shape(s, "fwd")
            got = []
            for key, held in (("seq", seq), ("call", call)):
                v = value.get(key) if isinstance(value, dict) else None
                if held is not None:
                    if held == "-0":
                        raise NotMemoizable("-0 in fwd")
                    got.append(int(held))
                elif isinstance(v, (float, bool)):
                    raise NotMemoizable(f"fwd.{key} that is no integer")
                else:
                    got.append(_freeze(v))
            out.append((sid, tuple(h for h in (seq, call) if h is not None), got[1], got[0]))
        return out, enc.indices.to_numpy(zero_copy_only=False).tolist()
