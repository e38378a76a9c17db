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

from ...store import read as store
from ...store.schema import EXTRA, FIELDS, JSON, KEYS, loads
from ..pricing.registry import lookup_aten
from ..pricing.memo import Fresh, Memo, NotMemoizable

# Read by no analysis and no summary (columns.py's per-kernel table alone reads them).
UNREAD = ("correlationId", "seqId", "altSeqId", "launch", "regs", "staticShared", "dynamicShared", "trace")
FIELDS_READ = [f for f in FIELDS if f not in UNREAD]
TIMES = ("kStart", "kEnd", "kDuration")
STATIC = [f for f in FIELDS_READ if f not in TIMES + ("fwd", "torchOps")]
# Text columns of few values, read as the file's dictionary (fwd and torchOps: nearly one a record).
DICTIONARY = tuple(f for f in STATIC if FIELDS[f] in (str, JSON))
BATCH = 16384  # records per Arrow batch: an episode's records keep theirs in memory
_VOLATILE = ("opId", "seq", "inputOpIds")
_RANGE_IDS = r'([{,]"(?:opId|seq)":)(-?\d+)|([{,]"inputOpIds":)(\[[\[\],\d-]*\])'
_FWD_SEQ, _FWD_CALL = r'^\{"seq":(?P<v>-?\d+)', r',"call":(?P<v>-?\d+)\}$'
# fwd's two ids cut in two passes, each anchored and without groups (RE2 rewrites faster so)
_FWD_IDS = ((r'^\{"seq":-?\d+', '{"seq":#'), (r',"call":-?\d+\}$', ',"call":#}'))
_MARK = "pyprof-volatile"
_HOLE = re.compile(r'([{,]"(?:opId|seq|inputOpIds|call)":)#')
_MINUS_ZERO = r'(^|[\[,])-0($|[,\]])'  # an id -0 == 0, but not as text


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


def _dictionary(column: Any) -> tuple[Any, np.ndarray]:
    """A column's values as an Arrow array (a dictionary column's own: its values may be more
    than the rows use) and per row the index of its value there; a null row's index is the
    array's length."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if not pa.types.is_dictionary(column.type):
        column = pc.dictionary_encode(column)
    indices = column.indices
    if indices.null_count:
        indices = pc.fill_null(indices, len(column.dictionary))
    return column.dictionary, indices.to_numpy(zero_copy_only=False)


class _Joined(dict):
    """4 * (the number of a torchOps text's numbering, Inputs._numberings) + (how fwd's ids number)
    -> the numbering of the two texts' ids together (fwd's come after: an int is never equal to
    a torchOps id, which is text)."""

    _FWD = ((), (0,), (0, 1), (0, 0))

    def __init__(self, numberings: list) -> None:
        super().__init__()
        self._numberings = numberings

    def __missing__(self, key: int) -> tuple:
        ranges = self._numberings[key // 4]
        after = len(set(ranges))
        got = self[key] = ranges + tuple(after + x for x in self._FWD[key % 4])
        return got


class Inputs:
    """Per-batch memo inputs of a store's records, with the caches that span batches."""

    def __init__(self) -> None:
        self._static: dict = {}
        self._skeletons: dict = {}
        self._frozen: dict = {}
        self._outer_keys: dict = {}
        self._threads: dict = {}
        self._names: dict = {}
        self._fresh = Fresh()  # (thread, episode, name, opId) of stateful ranges, checked per batch
        self._numbered: dict = {}  # a torchOps text's ids numbered by first appearance -> its number
        self._numberings: list = []  # and back
        self._joined = _Joined(self._numberings)
        self.memo = Memo(lambda where: store.record_at(where[0], where[1], FIELDS_READ, where[2]))

    def run(self, path: str, size: int = BATCH) -> Iterator[tuple[Any, np.ndarray, np.ndarray]]:
        """Per batch of `size` records: (batch, node per record, call number per record (0: no
        kernel)); NotMemoizable, before a batch is given, unless memo.Fresh holds up to it."""
        for rank, batch in store.batches(path, FIELDS_READ, size, DICTIONARY):
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
        reps, codes = self._values(batch, ("pid", "tid"))
        threads = np.array([self._threads.setdefault(t, len(self._threads)) for t in reps], np.int64)[codes]
        ranges, rcode, held = self._ranges(batch.column("torchOps"))
        fwds, fcode = self._fwds(batch.column("fwd"))
        markers, mcode = self._markers(batch.column("marker"))
        nodes, numbers, episodes = [0] * n, [0] * n, [0] * n
        memo = self.memo
        copy, kernel_of = memo.copy, memo.kernel
        joined = self._joined
        for i, (k, s, th, b, z, r, f, m) in enumerate(zip(kernel.tolist(), statics, threads.tolist(), bprop.tolist(),
                                                           sub0.tolist(), rcode.tolist(), fcode, mcode)):
            where = (batch, i, rank)
            if not k:
                nodes[i] = copy(s, where)
                continue
            rskel, rvol, outer, rnum = ranges[r]
            fskel, fvol, call, seq, fnum = fwds[f]
            if b and call is not None:  # calls.identity
                ident, starts = ("call", call), False
            else:
                ident, starts = ((seq if b else markers[m]), outer), outer is None and z
            nodes[i], numbers[i], episodes[i] = kernel_of(th, ident, starts, starts and not b, outer is not None,
                                                          (s, rskel, fskel), rvol + fvol, where, joined[4 * rnum + fnum])
        self._hold(held, np.asarray(rcode), kernel, threads, np.array(episodes, np.int64))
        return np.array(nodes, np.int32), np.array(numbers, np.int64)

    def _hold(self, held: tuple, codes: np.ndarray, kernel: np.ndarray, threads: np.ndarray,
              episodes: np.ndarray) -> None:
        """Check (thread, episode, name, opId) of each stateful range of each kernel record (Fresh)."""
        count, names, opids = held
        lengths = np.where(kernel, count[codes], 0)
        rows = np.repeat(np.arange(len(codes)), lengths)
        within = np.arange(len(rows)) - np.repeat(np.cumsum(lengths) - lengths, lengths)
        at = (np.cumsum(count) - count)[codes[rows]] + within
        self._fresh.add(threads[rows], episodes[rows], names[at], opids[at], self.memo.open_episodes())

    def _codes(self, column: Any) -> np.ndarray:
        """Per row, a number equal for equal values of `column` (null a value of its own)."""
        import pyarrow as pa

        t = column.type
        if pa.types.is_struct(t):
            parts = [column.is_null()] + [column.field(i) for i in range(t.num_fields)]
            return self._combine([self._codes(p) for p in parts])
        if pa.types.is_list(t):
            return self._list_codes(column)
        return _dictionary(column)[1]

    def _list_codes(self, column: Any) -> np.ndarray:
        """_codes of a list column: its length (-1: null) and its items' codes, each row's codes
        as one binary value (4 bytes an item) encoded as any column is."""
        import pyarrow as pa
        import pyarrow.compute as pc

        lengths = pc.fill_null(pc.list_value_length(column), -1).to_numpy(zero_copy_only=False).astype(np.int64)
        items = self._codes(pc.list_flatten(column)).astype(np.int32)
        ends = np.cumsum(np.maximum(lengths, 0) * 4)
        offsets = np.concatenate(([0], ends)).astype(np.int32)
        rows = pa.Array.from_buffers(pa.binary(), len(lengths), [None, pa.py_buffer(offsets), pa.py_buffer(items.tobytes())])
        codes = _dictionary(rows)[1]
        return self._combine([lengths + 1, codes]) if (lengths < 0).any() else codes

    @staticmethod
    def _combine(codes: list) -> np.ndarray:
        acc = np.zeros(len(codes[0]), np.int64)
        for c in codes:
            card = int(c.max()) + 1 if len(c) else 1
            if len(acc) and int(acc.max()) >= (1 << 62) // card:
                acc = np.unique(acc, return_inverse=True)[1].astype(np.int64)
            acc = acc * card + c
        return np.unique(acc, return_inverse=True)[1].reshape(-1)

    def _values(self, batch: Any, names: tuple) -> tuple[list, np.ndarray]:
        """The distinct tuples of values of columns `names`, and per record the index of its own."""
        codes = self._combine([self._codes(batch.column(name)) for name in names])
        _, first = np.unique(codes, return_index=True)
        return list(zip(*[batch.column(name).take(first).to_pylist() for name in names])), codes

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
        return np.array(ids, np.int64)[codes].tolist()

    def _markers(self, column: Any) -> tuple[list, list]:
        """The markers as call identities use them (equal when ==), and each record's index."""
        values, codes = _dictionary(column)
        return [self._intern(_freeze(loads(t))) for t in values.to_pylist()] + [None], codes.tolist()

    def _intern(self, v: Any) -> Any:
        return self._frozen.setdefault(v, v)

    def _ranges(self, column: Any) -> tuple[list, list]:
        """Per distinct torchOps text: (skeleton, volatile ids, the (name, opId) of the ranges a
        range state may hold, the outer range as an identity compares it); each record's index."""
        import pyarrow.compute as pc

        enc = pc.dictionary_encode(column, null_encoding="encode")
        texts = enc.dictionary
        # Each id between two NULs (no JSON text holds one), so that one split gives the
        # skeleton's pieces and the ids, in turn.
        pieces = pc.split_pattern(pc.replace_substring_regex(texts, _RANGE_IDS, "\\1\\3\0\\2\\4\0"), "\0")
        skel = pc.dictionary_encode(pc.binary_join(pc.list_slice(pieces, 0, None, 2), "#"))
        shapes = [None if t is None else self._shape(t, "torchOps") for t in skel.dictionary.to_pylist()]
        ids = pc.list_slice(pieces, 1, None, 2)
        counts = pc.fill_null(pc.list_value_length(ids), 0).to_numpy(zero_copy_only=False)
        flat = pc.list_flatten(ids)
        if pc.any(pc.match_substring(flat, "-0")).as_py() and pc.any(pc.match_substring_regex(flat, _MINUS_ZERO)).as_py():
            raise NotMemoizable("-0 among torchOps ids")
        shapes.append(None)  # a null text's
        codes = pc.fill_null(skel.indices, len(shapes) - 1).to_numpy(zero_copy_only=False)
        if (counts != np.array([0 if x is None else x[4] for x in shapes])[codes]).any():
            raise NotMemoizable("torchOps ids not where their keys are")
        offsets = np.concatenate(([0], np.cumsum(counts)))
        # The opIds of the ranges a range state may hold, text by text: where each is among the
        # ids (its skeleton says) and its name, as numbers.
        stateful = [x[1] if x is not None else [] for x in shapes]
        count = np.array([len(at) for at in stateful], np.int64)
        place = np.array([p for at in stateful for p, _ in at], np.int64)
        name = np.array([self._names.setdefault(x, len(self._names)) for at in stateful for _, x in at], np.int64)
        per_text = count[codes]
        rows = np.repeat(np.arange(len(codes)), per_text)
        at = (np.cumsum(count) - count)[codes[rows]] + np.arange(len(rows)) - np.repeat(np.cumsum(per_text) - per_text, per_text)
        opids = pc.cast(flat.take(offsets[rows] + place[at]), "int64").to_numpy(zero_copy_only=False)
        vols = ids.to_pylist()
        if ids.null_count:
            vols = [v or [] for v in vols]
        sid = [None if x is None else x[0] for x in shapes]
        outer = [None if x is None or x[2] is None else (x[2], x[3]) for x in shapes]
        cl = codes.tolist()
        # The outer range as an identity compares it: without its ids, then its ids (they come first).
        outers = [None if o is None else (o[0], v[:o[1]]) for o, v in zip(map(outer.__getitem__, cl), vols)]
        out = list(zip(map(sid.__getitem__, cl), vols, outers, self._patterns(flat, counts)))
        return out, enc.indices.to_numpy(zero_copy_only=False), (per_text, name[at], opids)

    def _patterns(self, flat: Any, counts: np.ndarray) -> list:
        """Per text, its ids (`counts` of `flat`, text by text) numbered by first appearance among
        themselves, as the number of that numbering (self._numberings)."""
        import pyarrow as pa

        if not len(flat):
            return [self._number(())] * len(counts)
        code = _dictionary(flat)[1].astype(np.int64)
        text = np.repeat(np.arange(len(counts)), counts)
        key = text * (int(code.max()) + 1) + code
        _, first, group = np.unique(key, return_index=True, return_inverse=True)
        group = group.reshape(-1)
        group_text = text[first]
        order = np.lexsort((first, group_text))
        ordered = group_text[order]
        rank = np.empty(len(first), np.int64)
        rank[order] = np.arange(len(order)) - np.searchsorted(ordered, ordered)
        numbers = rank[group].astype(np.int32)
        offsets = np.concatenate(([0], np.cumsum(counts) * 4)).astype(np.int32)
        rows = pa.Array.from_buffers(pa.binary(), len(counts), [None, pa.py_buffer(offsets), pa.py_buffer(numbers.tobytes())])
        values, which = _dictionary(rows)
        ids = [self._number(tuple(np.frombuffer(v, np.int32).tolist())) for v in values.to_pylist()]
        return np.array(ids, np.int64)[which].tolist()

    def _number(self, numbering: tuple) -> int:
        got = self._numbered.get(numbering)
        if got is None:
            got = self._numbered[numbering] = len(self._numberings)
            self._numberings.append(numbering)
        return got

    def _shape(self, skel: str, field: str) -> tuple:
        """What a skeleton says, decoded once. torchOps: (its id, the positions of the opIds of the
        ranges a range state may hold, with their names; the outer range without its ids (None:
        no range), the number of its ids (they come first); the number of ids); fwd: (its id,
        the object with its ids' keys holding a mark)."""
        got = self._skeletons.get((field, skel))
        if got is not None:
            return got
        if _MARK in skel:
            raise NotMemoizable(f"{field} text holding {_MARK}")
        try:
            value = loads(_HOLE.sub(rf'\g<1>"{_MARK}"', skel))
        except ValueError:  # an id that is no integer, cut in two (1.5 leaves "#.5")
            raise NotMemoizable(f"{field} ids that are no integers") from None
        if field == "fwd":
            if value is not None and not isinstance(value, dict):
                raise NotMemoizable("fwd is no object")
            got = (len(self._skeletons), value)
        else:
            got = (len(self._skeletons), *self._range_shape(value))
        self._skeletons[(field, skel)] = got
        return got

    def _range_shape(self, ops: Any) -> tuple:
        if not isinstance(ops, list):
            raise NotMemoizable("torchOps is no list")
        opid_at, holes = [], []
        for depth, r in enumerate(ops):
            if not isinstance(r, dict) or any(isinstance(v, dict) for v in r.values()):
                raise NotMemoizable("a torchOps range that is no flat object")
            stateful = depth == len(ops) - 1 or lookup_aten(r.get("name")) is not None
            for k, v in r.items():
                if v == _MARK:
                    if k == "opId" and stateful:
                        opid_at.append((len(holes), r.get("name")))
                    holes.append((depth, k))
                elif k in _VOLATILE and not (v is None or isinstance(v, str) or _plain(v)):
                    raise NotMemoizable("a torchOps id that is no integer")
            if r.get("opId") != _MARK and stateful:
                raise NotMemoizable("a PyTorch range a range state may hold without an integer opId")
        if not ops:
            return opid_at, None, 0, 0
        outer = _freeze({k: (None if v == _MARK else v) for k, v in ops[0].items()})
        keys = tuple(k for d, k in holes if d == 0)
        # The outer range compares as (outer, its ids in order): exact while one outer range
        # without its ids always has them in one order.
        if self._outer_keys.setdefault(outer, keys) != keys:
            raise NotMemoizable("PyTorch ranges with their ids in another order")
        return opid_at, self._intern(outer), len(keys), len(holes)

    def _fwds(self, column: Any) -> tuple[list, list]:
        """Per distinct fwd text: (skeleton, volatile ids, call, seq, how its ids number: 0 none,
        1 one, 2 two apart, 3 two equal); each record's index."""
        import pyarrow.compute as pc

        enc = pc.dictionary_encode(column, null_encoding="encode")
        texts = enc.dictionary
        skel = texts
        for pattern, hole in _FWD_IDS:
            skel = pc.replace_substring_regex(skel, pattern, hole)
        skel = pc.dictionary_encode(skel)
        shapes = [None if t is None else self._shape(t, "fwd") for t in skel.dictionary.to_pylist()]
        ids = []
        for pattern in (_FWD_SEQ, _FWD_CALL):
            got = pc.struct_field(pc.extract_regex(texts, pattern), [0])
            if pc.any(pc.equal(got, "-0")).as_py():
                raise NotMemoizable("-0 in fwd")
            ids.append(pc.cast(got, "int64").to_pylist())
        sid = [None if x is None else x[0] for x in shapes]
        out = [(sid[code], [seq, call], call, seq, 2 + (seq == call)) if code is not None and seq is not None
               and call is not None else self._fwd(shapes, code, seq, call)
               for code, seq, call in zip(skel.indices.to_pylist(), *ids)]
        return out, enc.indices.to_numpy(zero_copy_only=False).tolist()

    def _fwd(self, shapes: list, code: int | None, seq: int | None, call: int | None) -> tuple:
        """(skeleton, volatile ids, call, seq, how its ids number) of a fwd text without its two
        ids as integers."""
        if code is None:
            return None, [], None, None, 0
        sid, value = shapes[code]
        ids = [h for h in (seq, call) if h is not None]  # one at most: _fwds takes the texts with both
        return (sid, ids, call if call is not None else self._unmarked(value, "call"),
                seq if seq is not None else self._unmarked(value, "seq"), len(ids))

    @staticmethod
    def _unmarked(value: Any, key: str) -> Any:
        """fwd's `key` where the text did not give it as an integer (null, absent, a text)."""
        v = value.get(key) if isinstance(value, dict) else None
        if isinstance(v, (float, bool)):
            raise NotMemoizable(f"fwd.{key} that is no integer")
        return _freeze(v)
