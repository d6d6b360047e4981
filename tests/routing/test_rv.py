"""The proxy resourceVersion codec (routing.rv): 128-bit RVs (KEP-5504; the conformance matcher
HaveValidResourceVersion), object and vector forms, epochs and their publication."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from routing.rv import (
    FIELD_BITS,
    NATIVE_LIMIT,
    Epoch,
    EpochTable,
    RVCodec,
    RVError,
    RVMalformed,
    RVNotInSpace,
    RVTooOld,
    MAX_CATCH_UP,
    RVUnencodable,
    catch_up,
    compare,
    is_proxy_rv,
    is_valid_rv,
    natural_slot_bits,
    next_epoch,
    object_rv,
    parse_number,
    with_epoch,
)

HYPOTHESIS = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
NAMES = ("tp1", "tp2", "tp3", "tp4", "tp5", "tp6", "tp7", "tp8", "tp9", "tp10", "tp11", "tp12", "tp13", "tp14", "tp15", "tp16")
ETCD_MAX = 2**63 - 1


def _kep5504_key(rv: str) -> tuple[int, str]:
    return (len(rv), rv)


def _first_epoch(space: tuple[str, ...], current: tuple[int, ...], slot_bits: int | None = None) -> EpochTable:
    bits = slot_bits or natural_slot_bits(len(space))
    epoch = next_epoch(EpochTable(), space, current, slot_bits=bits)
    assert epoch is not None
    return EpochTable((epoch,))


# --- layout ---------------------------------------------------------------------------------


@pytest.mark.parametrize(("partitions", "bits"), [(1, 64), (2, 52), (4, 26), (5, 20), (8, 13), (16, 6)])
def test_bits_per_slot_for_common_partition_counts(partitions: int, bits: int) -> None:
    assert natural_slot_bits(partitions) == bits


@st.composite
def _spaces_and_vectors(draw: st.DrawFn) -> tuple[tuple[str, ...], tuple[int, ...], tuple[int, ...]]:
    n = draw(st.integers(1, 16))
    space = NAMES[:n]
    bits = natural_slot_bits(n)
    cap = (1 << bits) - 1
    base = tuple(draw(st.integers(0, max(0, ETCD_MAX - cap))) for _ in range(n))
    vector = tuple(draw(st.one_of(st.just(0), st.integers(max(b, 1), min(b + cap - 1, ETCD_MAX)))) for b in base)
    return space, base, vector


@HYPOTHESIS
@given(case=_spaces_and_vectors(), number=st.integers(1, 2**24 - 1))
def test_every_vector_rv_is_a_valid_uint128_and_round_trips(case: tuple[tuple[str, ...], tuple[int, ...], tuple[int, ...]], number: int) -> None:
    space, base, vector = case
    table = EpochTable((Epoch(number, space, natural_slot_bits(len(space)), base),))
    codec = RVCodec(space, table)

    rv = codec.encode(vector)

    assert is_valid_rv(rv) and is_proxy_rv(rv)
    assert int(rv).bit_length() <= 128
    if any(vector):
        assert codec.decode(rv) == vector


@HYPOTHESIS
@given(n=st.integers(1, 16), slot=st.data(), native=st.integers(1, ETCD_MAX))
def test_object_rvs_are_valid_uint128_and_decode_without_a_table(n: int, slot: st.DataObject, native: int) -> None:
    space = NAMES[:n]
    i = slot.draw(st.integers(0, n - 1))
    rv = RVCodec(space).object_rv(i, native)

    assert rv == object_rv(space[i], native)
    assert is_valid_rv(rv) and is_proxy_rv(rv)
    expected = [0] * n
    expected[i] = native
    assert RVCodec(space).decode(rv) == tuple(expected)
    assert RVCodec(space).native_for(rv, i) == str(native)


def test_object_and_vector_forms_never_collide_with_natives_or_each_other() -> None:
    codec = RVCodec(("rp1", "rp2"), _first_epoch(("rp1", "rp2"), (10, 10)))
    smallest_object = int(codec.object_rv(0, 1))
    largest_object = int(object_rv("zz", NATIVE_LIMIT - 1))
    smallest_vector = int(codec.encode((0, 0)))

    assert NATIVE_LIMIT < smallest_object
    assert largest_object < smallest_vector
    assert smallest_vector >= 1 << FIELD_BITS


# --- monotonicity ----------------------------------------------------------------------------


@st.composite
def _watch_histories(draw: st.DrawFn) -> tuple[tuple[str, ...], list[tuple[int, int]], int]:
    """A union watch: a start vector then events (slot, +delta), with epochs published on the
    way as the replicas would (small fields so that rollovers happen)."""
    n = draw(st.integers(1, 6))
    bits = draw(st.integers(6, 12))
    steps = draw(st.lists(st.tuples(st.integers(0, n - 1), st.integers(1, 40)), min_size=1, max_size=120))
    return NAMES[:n], steps, bits


@HYPOTHESIS
@given(history=_watch_histories(), start=st.integers(1, 10**12))
def test_rvs_strictly_increase_along_a_union_watch_across_epoch_rollovers(
    history: tuple[tuple[str, ...], list[tuple[int, int]], int], start: int
) -> None:
    space, steps, bits = history
    vector = [start + i for i in range(len(space))]
    table = _first_epoch(space, tuple(vector), bits)
    codec = RVCodec(space, table)
    previous = codec.encode(vector)
    for slot, delta in steps:
        vector[slot] += delta
        # The publisher runs between events (it sees the partitions' current RVs = this vector).
        codec.set_table(catch_up(codec.table, space, vector, slot_bits=bits, retain=1000))
        current = codec.encode(vector)
        assert compare(current, previous) == 1, (previous, current)
        assert _kep5504_key(current) > _kep5504_key(previous)
        assert codec.decode(current) == tuple(vector)
        assert int(current).bit_length() <= 128
        previous = current


@HYPOTHESIS
@given(data=st.data())
def test_kep5504_order_matches_causal_order_of_vectors_in_every_epoch(data: st.DataObject) -> None:
    """For vectors v <= w (w happened after v), encode(v) <= encode(w), whichever epochs each
    lands in: bases never go down and the newest fitting epoch is used. Holds for watches that
    lag the newest writes by less than a quarter of a field (the epochs' lag allowance)."""
    n = data.draw(st.integers(1, 5))
    space = NAMES[:n]
    bits = data.draw(st.integers(4, 10))
    cap = (1 << bits) - 1
    table = _first_epoch(space, tuple([100] * n), bits)
    current = [100] * n
    for _ in range(data.draw(st.integers(0, 6))):
        current = [c + data.draw(st.integers(0, cap)) for c in current]
        table = catch_up(table, space, current, slot_bits=bits, retain=1000)
    codec = RVCodec(space, table)
    # w lags the partitions' current RVs (what the publisher saw) by less than the quarter of a
    # field that epochs leave behind them; v is any earlier position.
    lag = cap // 4
    w = [data.draw(st.integers(max(1, c - lag), c)) for c in current]
    v = [data.draw(st.integers(1, x)) for x in w]
    try:
        ev = codec.encode(v)
    except RVUnencodable:
        return  # v lags the newest bases by more than any retained epoch spans
    ew = codec.encode(w)  # a later position of a position that encodes always encodes
    assert compare(ev, ew) <= 0
    assert (ev == ew) == (v == w)


# --- decoding by other replicas ---------------------------------------------------------------


def test_any_replica_with_the_same_table_decodes_any_other_replicas_rvs() -> None:
    space = ("rp1", "rp2", "rp3", "rp4")
    table = _first_epoch(space, (5000, 7000, 1, 90))
    one, other = RVCodec(space, table), RVCodec(space, table)

    rv = one.encode((5001, 7002, 3, 0))

    assert other.decode(rv) == (5001, 7002, 3, 0)
    assert other.native_for(rv, 1) == "7002"


def test_a_replica_with_more_partitions_decodes_an_rv_of_fewer_by_name() -> None:
    table = _first_epoch(("tp1", "tp2"), (10, 20))
    rv = RVCodec(("tp1", "tp2"), table).encode((11, 21))

    assert RVCodec(("tp1", "tp2", "tp3"), table).decode(rv) == (11, 21, 0)
    assert RVCodec(("tp2",), table).decode(rv) == (21,)


def test_an_rv_of_a_dropped_epoch_is_too_old_and_one_of_an_unseen_epoch_says_so() -> None:
    space = ("tp1", "tp2")
    bits = 8
    table = _first_epoch(space, (1, 1), bits)
    old = RVCodec(space, table).encode((2, 2))
    for n in range(3):
        epoch = next_epoch(table, space, (200 * (n + 1), 1), slot_bits=bits)
        assert epoch is not None
        table = with_epoch(table, epoch, retain=2)
    assert len(table.epochs) == 2

    with pytest.raises(RVTooOld, match="too old"):
        RVCodec(space, table).decode(old)
    newer = RVCodec(space, table).encode((600, 2))
    with pytest.raises(RVTooOld, match="newer than this replica knows") as caught:
        RVCodec(space, _first_epoch(space, (1, 1), bits)).decode(newer)
    assert caught.value.epoch == table.newest_number


def test_next_epoch_waits_for_half_the_range_and_trails_by_a_quarter() -> None:
    space = ("rp1",)
    table = _first_epoch(space, (1000,), 10)  # capacity 1023: base 1000 - 255
    assert table.epochs[0].base == (745,)
    assert next_epoch(table, space, (745 + 500,), slot_bits=10) is None
    epoch = next_epoch(table, space, (745 + 600,), slot_bits=10)
    assert epoch is not None and epoch.number == 2 and epoch.base == (745 + 600 - 255,)


def test_bases_never_decrease_in_a_table() -> None:
    with pytest.raises(ValueError, match="base went down"):
        EpochTable((Epoch(1, ("a",), 8, (10,)), Epoch(2, ("a",), 8, (9,))))


# --- native_for and malformed input -----------------------------------------------------------


@pytest.mark.parametrize("rv", ["", "0", "12345", "abc", "-5", " 5", str(NATIVE_LIMIT - 1)])
def test_native_for_passes_on_what_the_partition_judges_itself(rv: str) -> None:
    assert RVCodec(("tp1", "tp2")).native_for(rv, 0) is None


@pytest.mark.parametrize(
    "rv",
    [
        "10010000000000000000059200000000000000000589",  # the old 44-digit format (143 bits)
        "0" + str(2**100),  # leading zero
        str(2**128),  # 129 bits
        str(2**100 + 5),  # object form with partition id 0 (no such partition)
        str(NATIVE_LIMIT),  # between natives and the object form
    ],
)
def test_native_for_rejects_numbers_that_are_no_proxy_rv_of_this_space(rv: str) -> None:
    with pytest.raises(RVError):
        RVCodec(("tp1", "tp2"), _first_epoch(("tp1", "tp2"), (1, 1))).native_for(rv, 0)


def test_native_for_rejects_an_rv_of_another_partition() -> None:
    codec = RVCodec(("tp1", "tp2"))

    with pytest.raises(RVNotInSpace):
        codec.native_for(codec.object_rv(1, 42), 0)


@HYPOTHESIS
@given(text=st.text(max_size=60))
def test_decode_raises_only_rverror(text: str) -> None:
    codec = RVCodec(("tp1", "tp2"), _first_epoch(("tp1", "tp2"), (1, 1)))
    try:
        codec.decode(text)
    except RVError:
        return
    assert is_proxy_rv(text)


@pytest.mark.parametrize("rv", ["", "0", "01", "+1", "1 ", "\u0663", "1" * 40, "abc"])
def test_parse_number_accepts_only_canonical_decimals(rv: str) -> None:
    assert parse_number(rv) is None or rv == "0"


def test_compare_is_by_length_then_lexical() -> None:
    assert compare("9", "10") == -1
    assert compare("100", "99") == 1
    assert compare("124", "124") == 0


def test_decode_rejects_padding_bits() -> None:
    space = ("a", "b", "c")  # 3 x 34 bits = 102 of 104: two padding bits
    codec = RVCodec(space, _first_epoch(space, (5, 5, 5)))
    rv = int(codec.encode((5, 5, 5)))

    with pytest.raises(RVMalformed):
        codec.decode(str(rv | 1))


@HYPOTHESIS
@given(halves=st.floats(0.01, MAX_CATCH_UP - 2), bits=st.integers(6, 16))
def test_a_late_catch_up_leaves_no_gap_between_the_old_range_and_the_current_position(halves: float, bits: int) -> None:
    """However far the partition went past the newest epoch (up to MAX_CATCH_UP half ranges)."""
    jump = max(1, int(halves * (((1 << bits) - 1) // 2)))
    space = ("tp1", "tp2")
    table = _first_epoch(space, (1000, 1000), bits)
    old = table.epochs[-1]

    table = catch_up(table, space, (1000 + jump, 1000), slot_bits=bits, retain=1000)

    codec = RVCodec(space, table)
    for native in range(old.base[0] + 1, 1000 + jump + 1, max(1, jump // 97)):
        codec.encode((native, 1000))  # raises RVUnencodable on a gap
    assert codec.decode(codec.encode((1000 + jump, 1000))) == (1000 + jump, 1000)
