"""The proxy resourceVersion codec: numbers only, no I/O (docs/resource-versions.md).

A merged resource (nodes over every resource partition, pods over every tenant partition, ...)
has one RV space: the partitions whose native RVs together say where a client is. The proxy
speaks its own RVs for such resources, positive decimal integers of at most 128 bits without
leading zeros (KEP-5504 "Comparable Resource Version", GA in Kubernetes 1.35; the conformance
matcher `HaveValidResourceVersion` in test/e2e/common/apimachinery/resourceversion_matchers.go
checks `0 < rv < 2**128`). Two forms share the number line, told apart by their magnitude:

    [1, 2**64)           native RVs (etcd revisions): never emitted for a merged resource
    [2**100, 2**100+2**96)  OBJECT form: 2**100 | partition id << 64 | native
                         one partition's native RV (list items, single-partition answers).
                         Needs no table: the partition id is a 32-bit hash of its name.
    [2**104, 2**128)     VECTOR form: epoch << 104 | field_0 | field_1 | ...
                         every partition's position (list RVs, watch events, bookmarks).

A vector-form RV names an EPOCH of a table all replicas share (kept in the system partition,
`proxy.rv_epochs`). An epoch fixes the partitions of the space, the bits per field and a base
vector; field i holds `native_i - base_i + 1`, or 0 when the vector does not know partition i.
Fields are fixed-width, most significant first, so within an epoch a vector that grows in any
slot encodes to a greater number; epochs only grow and bases never decrease, so encoding in the
newest epoch that fits is monotonic across epochs too (`EpochTable.encode`). KEP-5504 compares
RVs by length, then lexically, which for these integers is numeric order.

Errors: every decoding failure is an `RVError`: `RVMalformed` for a value that is not an RV the
proxy issues, `RVTooOld` for an epoch the table no longer (or not yet) holds, `RVNotInSpace` for
an RV that does not name the partition asked about. `RVUnencodable` when no epoch fits.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

RV_BITS = 128  # KEP-5504 / HaveValidResourceVersion: at most 128 bits
EPOCH_BITS = 24  # 16.7 million epochs; one per ~hour at 5,000 writes/s with 4 partitions
FIELD_BITS = RV_BITS - EPOCH_BITS  # bits shared by the partition fields of a vector RV
MAX_SLOT_BITS = 64  # a field holds native - base + 1 with natives below 2**63 (etcd int64)
NATIVE_LIMIT = 1 << 64  # native RVs are below this; proxy RVs are above
OBJECT_MARKER = 1 << 100  # object-form RVs: [2**100, 2**100 + 2**96)
_OBJECT_END = OBJECT_MARKER + (1 << 96)
_VECTOR_START = 1 << FIELD_BITS  # vector-form RVs have an epoch >= 1 in the top bits
_RV_LIMIT = 1 << RV_BITS
_MAX_DIGITS = len(str(_RV_LIMIT - 1))  # 39
_NATIVE_MASK = NATIVE_LIMIT - 1
_ID_MASK = (1 << 32) - 1


class RVError(ValueError):
    """A resourceVersion the proxy cannot use for this request."""


class RVMalformed(RVError):
    """Not a resourceVersion the proxy issues (garbage, leading zeros, over 128 bits, padding)."""


class RVTooOld(RVError):
    """A vector RV of an epoch the table does not hold: dropped (too old) or not yet known.
    `epoch` is the epoch number the RV names."""

    def __init__(self, message: str, epoch: int) -> None:
        super().__init__(message)
        self.epoch = epoch


class RVNotInSpace(RVError):
    """A well-formed RV that does not name a position in the partition asked about."""


class RVUnencodable(RVError):
    """No epoch of the table can encode this vector (the table is behind the partitions)."""


def partition_id(name: str) -> int:
    """The 32-bit id of a partition in object-form RVs: the first 4 bytes of SHA-256(name)."""
    return int.from_bytes(hashlib.sha256(name.encode()).digest()[:4], "big")


def natural_slot_bits(partitions: int) -> int:
    """Bits per field when `partitions` share the 104 field bits (2: 52, 4: 26, 8: 13, 16: 6)."""
    if partitions < 1:
        raise ValueError("an RV space has at least one partition")
    return min(MAX_SLOT_BITS, FIELD_BITS // partitions)


def parse_number(rv: str) -> int | None:
    """The integer a canonical decimal RV denotes, None when `rv` is not one (empty, signs,
    spaces, leading zeros, more than 39 digits: KEP-5504 canonical form)."""
    if not rv or len(rv) > _MAX_DIGITS or not rv.isascii() or not rv.isdigit() or (rv[0] == "0" and rv != "0"):
        return None
    return int(rv)


def is_proxy_rv(rv: str) -> bool:
    """True when `rv` is shaped like a proxy RV (object or vector form, below 2**128).
    Says nothing about whether this replica's table can decode it."""
    value = parse_number(rv)
    return value is not None and NATIVE_LIMIT <= value < _RV_LIMIT


def is_valid_rv(rv: str) -> bool:
    """KEP-5504 / HaveValidResourceVersion: a positive decimal integer of at most 128 bits
    without leading zeros."""
    value = parse_number(rv)
    return value is not None and 0 < value < _RV_LIMIT


def compare(a: str, b: str) -> int:
    """Compare two RVs as KEP-5504 does: by length, then lexically. Returns -1, 0 or 1."""
    ka, kb = (len(a), a), (len(b), b)
    return (ka > kb) - (ka < kb)


# -- object form ---------------------------------------------------------------------------


def object_rv(partition: str, native: int) -> str:
    """The object-form RV of `native` in `partition`. Raises RVUnencodable for a native out of
    range (0 is not an RV; natives are below 2**64)."""
    if not 0 < native < NATIVE_LIMIT:
        raise RVUnencodable(f"native resourceVersion {native} out of range")
    return str(OBJECT_MARKER | (partition_id(partition) << 64) | native)


@dataclass(frozen=True, slots=True)
class ObjectRV:
    partition_id: int
    native: int


# -- epochs --------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Epoch:
    """One epoch of an RV space: `partitions` in slot order, `slot_bits` bits per field and the
    `base` vector the fields count from."""

    number: int
    partitions: tuple[str, ...]
    slot_bits: int
    base: tuple[int, ...]

    def __post_init__(self) -> None:
        if not 0 < self.number < (1 << EPOCH_BITS):
            raise ValueError(f"epoch {self.number} out of range")
        if len(self.base) != len(self.partitions) or not self.partitions:
            raise ValueError("an epoch has one base per partition")
        if not 1 <= self.slot_bits <= natural_slot_bits(len(self.partitions)):
            raise ValueError(f"slot_bits {self.slot_bits} does not fit {len(self.partitions)} partitions")
        if any(b < 0 or b >= NATIVE_LIMIT for b in self.base):
            raise ValueError("base RVs are natives")

    @property
    def capacity(self) -> int:
        """Native RVs one field can span: base .. base + capacity - 1."""
        return (1 << self.slot_bits) - 1

    def encode(self, vector: Sequence[int]) -> int | None:
        """The vector as an integer of this epoch, None when some known slot does not fit.
        `vector` is aligned with `partitions`; 0 means unknown."""
        value = self.number
        cap = self.capacity
        for native, base in zip(vector, self.base):
            if native:
                offset = native - base + 1
                if not 0 < offset <= cap:
                    return None
            else:
                offset = 0
            value = (value << self.slot_bits) | offset
        return value << (FIELD_BITS - self.slot_bits * len(self.base))

    def decode(self, value: int) -> tuple[int, ...]:
        """The vector (0 = unknown) of an integer of this epoch. Raises RVMalformed."""
        bits = self.slot_bits
        n = len(self.base)
        padding = FIELD_BITS - bits * n
        if value & ((1 << padding) - 1):
            raise RVMalformed("resourceVersion has bits where this epoch has none")
        fields = value >> padding
        mask = (1 << bits) - 1
        out = [0] * n
        for i in range(n - 1, -1, -1):
            offset = fields & mask
            fields >>= bits
            out[i] = self.base[i] + offset - 1 if offset else 0
        return tuple(out)


@dataclass(frozen=True, slots=True)
class EpochTable:
    """Every epoch replicas may meet, ascending by number (`proxy.rv_epochs` keeps it shared)."""

    epochs: tuple[Epoch, ...] = ()
    _by_number: Mapping[int, Epoch] = field(default_factory=dict, compare=False, repr=False)

    def __post_init__(self) -> None:
        numbers = [e.number for e in self.epochs]
        if numbers != sorted(set(numbers)):
            raise ValueError("epochs must be unique and ascending")
        for older, newer in _same_space_pairs(self.epochs):
            if any(n < o for o, n in zip(older.base, newer.base)):
                raise ValueError(f"epoch {newer.number}: a base went down (bases never decrease)")
        object.__setattr__(self, "_by_number", {e.number: e for e in self.epochs})

    @property
    def newest_number(self) -> int:
        return self.epochs[-1].number if self.epochs else 0

    def get(self, number: int) -> Epoch | None:
        return self._by_number.get(number)

    def newest(self, partitions: tuple[str, ...]) -> Epoch | None:
        """The newest epoch of this exact partition list, if any."""
        for epoch in reversed(self.epochs):
            if epoch.partitions == partitions:
                return epoch
        return None

    def encode(self, partitions: tuple[str, ...], vector: Sequence[int]) -> str:
        """The vector-form RV of `vector` (aligned with `partitions`, 0 = unknown) in the newest
        epoch of these partitions that fits it. Raises RVUnencodable."""
        for epoch in reversed(self.epochs):
            if epoch.partitions != partitions:
                continue
            value = epoch.encode(vector)
            if value is not None:
                return str(value)
        raise RVUnencodable(f"no epoch of the resourceVersion table fits the position {list(vector)} of {list(partitions)}")

    def decode_vector(self, value: int) -> tuple[Epoch, tuple[int, ...]]:
        """The epoch and vector of a vector-form integer. Raises RVTooOld, RVMalformed."""
        number = value >> FIELD_BITS
        epoch = self._by_number.get(number)
        if epoch is None:
            newest = self.newest_number
            when = "is newer than this replica knows" if number > newest else "is too old"
            raise RVTooOld(f"resourceVersion epoch {number} {when} (newest known: {newest})", number)
        return epoch, epoch.decode(value & ((1 << FIELD_BITS) - 1))


def _same_space_pairs(epochs: Iterable[Epoch]) -> Iterable[tuple[Epoch, Epoch]]:
    last: dict[tuple[str, ...], Epoch] = {}
    for epoch in epochs:
        previous = last.get(epoch.partitions)
        if previous is not None:
            yield previous, epoch
        last[epoch.partitions] = epoch


# Publication policy: a new epoch is published once any field of the newest one has used half
# its range, and its base trails the partitions' current RVs by a quarter of the range, so a
# watch that lags the newest writes by up to that much still encodes in it, and the remaining
# three quarters are headroom for writes before the next publication is seen by every replica.
PUBLISH_AT = 2  # publish when used >= capacity / PUBLISH_AT
LAG_ALLOWANCE = 4  # new base = current - capacity / LAG_ALLOWANCE


def next_epoch(table: EpochTable, partitions: tuple[str, ...], current: Sequence[int], *, slot_bits: int) -> Epoch | None:
    """The epoch to publish for `partitions` given their `current` native RVs, or None while
    the newest epoch of these partitions still has headroom. Pure: the caller writes it."""
    newest = table.newest(partitions)
    lag = ((1 << slot_bits) - 1) // LAG_ALLOWANCE
    if newest is not None:
        half = newest.capacity // PUBLISH_AT
        used = [c - b + 1 for c, b in zip(current, newest.base)]
        if max(used) < half:
            return None
        # Only the fields that need room move: a partition with few writes keeps its base, so a
        # watch that has not heard from it for a while (bookmarks come about once a minute)
        # still encodes in the new epoch. A field moves at most half the old range, so the new
        # range starts inside the old one and every position in between encodes in one of them
        # (a publication that comes late is followed by more: see `catch_up`).
        base = tuple(
            max(b, min(c - lag, b + half)) if u >= half else b for b, c, u in zip(newest.base, current, used)
        )
    else:
        base = tuple(max(0, c - lag) for c in current)
    return Epoch(table.newest_number + 1, partitions, slot_bits, base)


# epochs one catch-up may publish at most: far more than a table that is merely late needs.
MAX_CATCH_UP = 64


def catch_up(table: EpochTable, partitions: tuple[str, ...], current: Sequence[int], *, slot_bits: int, retain: int) -> EpochTable:
    """`table` with as many new epochs of `partitions` as `next_epoch` asks for in a row (each
    moves its fields at most half a range), so that `current` has headroom again. Returns
    `table` itself when none is needed."""
    for _ in range(MAX_CATCH_UP):
        epoch = next_epoch(table, partitions, current, slot_bits=slot_bits)
        if epoch is None:
            break
        table = with_epoch(table, epoch, retain=retain)
    return table


def with_epoch(table: EpochTable, epoch: Epoch, *, retain: int) -> EpochTable:
    """`table` plus `epoch`, keeping the newest `retain` epochs of each partition list."""
    epochs = [*table.epochs, epoch]
    kept: list[Epoch] = []
    counts: dict[tuple[str, ...], int] = {}
    for e in reversed(epochs):
        counts[e.partitions] = counts.get(e.partitions, 0) + 1
        if counts[e.partitions] <= retain:
            kept.append(e)
    return EpochTable(tuple(reversed(kept)))


def table_to_json(table: EpochTable) -> str:
    """The table as stored in the system partition (base RVs as strings: they are uint64)."""
    return json.dumps(
        {
            "version": 1,
            "epochs": [
                {"epoch": e.number, "partitions": list(e.partitions), "slotBits": e.slot_bits, "base": [str(b) for b in e.base]}
                for e in table.epochs
            ],
        },
        separators=(",", ":"),
    )


def table_from_json(text: str) -> EpochTable:
    """Parse `table_to_json`'s output. Raises ValueError naming what is wrong."""
    try:
        doc = json.loads(text)
        if doc.get("version") != 1:
            raise ValueError(f"unknown table version {doc.get('version')!r}")
        epochs = tuple(
            Epoch(int(e["epoch"]), tuple(str(p) for p in e["partitions"]), int(e["slotBits"]), tuple(int(b) for b in e["base"]))
            for e in doc["epochs"]
        )
    except (KeyError, TypeError, AttributeError, json.JSONDecodeError) as exc:
        raise ValueError(f"malformed resourceVersion table: {exc!r}") from None
    return EpochTable(epochs)


# -- one RV space --------------------------------------------------------------------------


def joined_partitions(space: tuple[str, ...], codec: RVCodec) -> tuple[str, ...]:
    """The live partitions `codec`'s space adds at the end of `space` (a partition-set change:
    slots are append-only). Raises ValueError when `codec`'s space does not start with `space`."""
    if codec.space[: len(space)] != space:
        raise ValueError(f"partitions {list(space)} cannot become {list(codec.space)}: slots are append-only")
    return tuple(p for p in codec.space[len(space):] if p not in codec.retired)



class RVCodec:
    """The codec of one RV space: `space` (partitions in slot order) and the current table.

    Mutable only through `set_table` (a plain assignment: atomic on the event loop); every
    other method is a pure computation over the table it finds.
    """

    __slots__ = ("space", "table", "retired", "live_slots", "_ids", "_id_of_slot", "_slot_bits")

    def __init__(self, space: tuple[str, ...], table: EpochTable | None = None, *, retired: Iterable[str] = ()) -> None:
        self.space = space
        self.table = table or EpochTable()
        # partitions whose slot is kept (never reused) but who no longer take part: their field
        # is whatever the vector last knew, and nothing waits for them
        self.retired = frozenset(retired)
        self.live_slots = tuple(i for i, p in enumerate(space) if p not in self.retired)
        self._id_of_slot = tuple(partition_id(p) for p in space)
        self._ids = {pid: i for i, pid in enumerate(self._id_of_slot)}
        if len(self._ids) != len(space):
            raise ValueError(f"partition names {list(space)} collide in object-form RVs")

    def set_table(self, table: EpochTable) -> None:
        self.table = table

    @property
    def rv_space(self) -> tuple[str, ...]:
        """The partitions of the routes whose RVs this codec speaks (`Route.rv_space`)."""
        return self.space

    def encode(self, vector: Sequence[int]) -> str:
        """The vector-form RV of `vector` (slot order, 0 = unknown). Raises RVUnencodable."""
        return self.table.encode(self.space, vector)

    def object_rv(self, slot: int, native: int) -> str:
        """The object-form RV of one partition's native RV. Raises RVUnencodable."""
        if not 0 < native < NATIVE_LIMIT:
            raise RVUnencodable(f"native resourceVersion {native} out of range")
        return str(OBJECT_MARKER | (self._id_of_slot[slot] << 64) | native)

    def decode(self, rv: str) -> tuple[int, ...]:
        """The vector (slot order, 0 = unknown) a proxy RV names: one slot for the object form,
        the partitions of its epoch that are in this space for the vector form. Raises
        RVMalformed (not a proxy RV), RVTooOld (epoch not held), RVNotInSpace (names none of
        this space's partitions)."""
        value = parse_number(rv)
        if value is None or not NATIVE_LIMIT <= value < _RV_LIMIT:
            raise RVMalformed(f"not a proxy resourceVersion: {rv[:64]!r}")
        out = [0] * len(self.space)
        if value >= _VECTOR_START:
            epoch, vector = self.table.decode_vector(value)
            if epoch.partitions == self.space:
                return vector
            for name, native in zip(epoch.partitions, vector):
                if native and name in self.space:
                    out[self.space.index(name)] = native
        elif OBJECT_MARKER <= value < _OBJECT_END:
            slot = self._ids.get((value >> 64) & _ID_MASK)
            native = value & _NATIVE_MASK
            if slot is None or not native:
                raise RVNotInSpace("resourceVersion names a partition outside this resource's partitions")
            out[slot] = native
        else:
            raise RVMalformed(f"not a proxy resourceVersion: {rv[:64]!r}")
        if not any(out):
            raise RVNotInSpace("resourceVersion names none of this resource's partitions")
        return tuple(out)

    @staticmethod
    def is_vector_form(rv: str) -> bool:
        """Whether `rv` is a vector-form proxy RV (a position in every partition of its epoch,
        where a 0 field means "nothing seen of that partition yet")."""
        value = parse_number(rv)
        return value is not None and _VECTOR_START <= value < _RV_LIMIT

    def is_complete(self, vector: Sequence[int]) -> bool:
        """Whether every live slot of `vector` is known (retired slots need not be)."""
        return all(vector[i] for i in self.live_slots)

    def native_for(self, rv: str, slot: int) -> str | None:
        """What to send partition `slot` for a client's RV: None to send the value as it is
        ("", "0", a native-sized number, anything not numeric: the partition judges those
        itself), else the partition's native RV. Raises RVError for a proxy-sized RV that does
        not name a position in that partition."""
        value = parse_number(rv)
        if value is None or value < NATIVE_LIMIT:
            if value is None and rv.isascii() and rv.isdigit() and len(rv) > 1:
                raise RVMalformed(f"not a proxy resourceVersion: {rv[:64]!r}")
            return None
        native = self.decode(rv)[slot]
        if not native:
            raise RVNotInSpace(f"resourceVersion names no position in partition {self.space[slot]}")
        return str(native)


class NativeCodec(RVCodec):
    """The "RV space" of one partition's objects that keep their native resourceVersions (the
    system partition's cluster-scoped objects: CSIDrivers, RuntimeClasses, ...): every RV is
    the partition's own, so a watch cache of them (role `system`) answers exactly what the
    partition would, and a client may carry its RVs to the partition when the cache cannot
    serve. `rv_space` is () as for the routes of such objects (routing.decide.rv_space_of)."""

    __slots__ = ()

    def __init__(self, partition: str) -> None:
        super().__init__((partition,))

    @property
    def rv_space(self) -> tuple[str, ...]:
        return ()

    def encode(self, vector: Sequence[int]) -> str:
        """The partition's native RV."""
        return str(vector[0])

    def object_rv(self, slot: int, native: int) -> str:
        """The native RV itself."""
        return str(native)

    def decode(self, rv: str) -> tuple[int, ...]:
        """(native,) for a native RV; raises RVMalformed for anything else."""
        value = parse_number(rv)
        if value is None or not 0 < value < NATIVE_LIMIT:
            raise RVMalformed(f"not a resourceVersion of partition {self.space[0]}: {rv[:64]!r}")
        return (value,)

    @staticmethod
    def is_vector_form(rv: str) -> bool:
        """A native RV is a position in the only partition."""
        return parse_number(rv) is not None

    def native_for(self, rv: str, slot: int) -> str | None:
        """Every RV goes to the partition as it is."""
        return None
