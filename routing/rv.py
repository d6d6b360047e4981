"""The proxy resourceVersion codec (DESIGN §5).

A proxy RV encodes an RV vector: one native resourceVersion per partition slot of a merged
resource (all tenant partitions, or all resource partitions, in configuration order). Layout,
all decimal digits:

    "1" | epoch (3 digits, 000-999) | slot 0 (20 digits) | slot 1 (20 digits) | ...

20 digits hold any uint64 (etcd revisions are int64). The leading `1` keeps the number free of
leading zeros, as KEP-5504 ("Comparable Resource Version", GA in 1.35) requires of RVs: positive
decimal integers compared by length, then lexically. With fixed-width slots, a vector whose
fields only grow encodes to a string that grows, so a union watch's RVs strictly increase.
Any replica with the same configuration (same epoch, same partition order) decodes any other
replica's RVs: the codec keeps no table.

Errors: `decode` raises `RVError` for anything that is not a proxy RV of this epoch and width;
callers answer such RVs with 410 Expired so the client relists (client-go's reflector treats
reason `Expired` as "relist", `k8s.io/client-go/tools/cache/reflector.go` isExpiredError).
"""

from __future__ import annotations

from collections.abc import Sequence

SLOT_DIGITS = 20  # digits per partition slot: len(str(2**64 - 1)) == 20
EPOCH_DIGITS = 3  # config epochs 000..999; an epoch change invalidates outstanding RVs
_HEADER = 1 + EPOCH_DIGITS
_MAX_NATIVE = 10**SLOT_DIGITS - 1


class RVError(ValueError):
    """The string is not a proxy RV this configuration can decode."""


def proxy_rv_length(slots: int) -> int:
    """Length in characters of a proxy RV with `slots` partition slots."""
    return _HEADER + SLOT_DIGITS * slots


def is_proxy_rv(rv: str, slots: int) -> bool:
    """True when `rv` has the shape of a proxy RV with `slots` slots (digits, right length)."""
    return len(rv) == proxy_rv_length(slots) and rv[0] == "1" and rv.isdigit() and rv.isascii()


def encode(epoch: int, vector: Sequence[int]) -> str:
    """Encode an RV vector. Raises RVError for an epoch or native RV out of range."""
    if not 0 <= epoch < 10**EPOCH_DIGITS:
        raise RVError(f"epoch {epoch} out of range")
    parts = ["1", str(epoch).zfill(EPOCH_DIGITS)]
    for native in vector:
        if not 0 <= native <= _MAX_NATIVE:
            raise RVError(f"native resourceVersion {native} out of range")
        parts.append(str(native).zfill(SLOT_DIGITS))
    return "".join(parts)


def decode(rv: str, *, epoch: int, slots: int) -> tuple[int, ...]:
    """Decode a proxy RV into its vector. Raises RVError if it is not one of ours."""
    if not is_proxy_rv(rv, slots):
        raise RVError(f"not a proxy resourceVersion: {rv[:64]!r}")
    if int(rv[1:_HEADER]) != epoch:
        raise RVError(f"resourceVersion from another configuration epoch: {rv[1:_HEADER]}")
    return tuple(int(rv[i : i + SLOT_DIGITS]) for i in range(_HEADER, len(rv), SLOT_DIGITS))


def compare(a: str, b: str) -> int:
    """Compare two RVs as KEP-5504 does: by length, then lexically. Returns -1, 0 or 1."""
    ka, kb = (len(a), a), (len(b), b)
    return (ka > kb) - (ka < kb)


def with_slot(vector: Sequence[int], slot: int, native: int) -> tuple[int, ...]:
    """The vector with one slot replaced."""
    out = list(vector)
    out[slot] = native
    return tuple(out)


def single_slot(slots: int, slot: int, native: int) -> tuple[int, ...]:
    """A vector that names one partition's native RV and zeros elsewhere (list items and
    single-partition answers of merged resources)."""
    return with_slot((0,) * slots, slot, native)


def to_native(rv: str, *, epoch: int, slots: int, slot: int) -> str | None:
    """Translate a client's RV for one partition slot of a merged resource.

    Returns None when `rv` is not shaped like a proxy RV (a native RV a protobuf client got from
    a single-partition answer, "0", or garbage the partition judges itself). Raises RVError when
    it is shaped like one but cannot be used: another epoch, or a vector that does not know this
    partition's position (zero slot).
    """
    if not is_proxy_rv(rv, slots):
        return None
    native = decode(rv, epoch=epoch, slots=slots)[slot]
    if native == 0:
        raise RVError("resourceVersion does not name a position in this partition")
    return str(native)
