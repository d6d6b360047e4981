"""The proxy resourceVersion codec (routing.rv): DESIGN §5 and KEP-5504 ("Comparable Resource
Version": RVs are positive decimal integers without leading zeros, compared by length then
lexically)."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from routing.rv import (
    RVError,
    compare,
    decode,
    encode,
    is_proxy_rv,
    proxy_rv_length,
    single_slot,
    to_native,
    with_slot,
)

HYPOTHESIS = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])

U64 = 2**64 - 1
EPOCHS = st.integers(min_value=0, max_value=999)
NATIVES = st.integers(min_value=0, max_value=U64)
VECTORS = st.lists(NATIVES, min_size=1, max_size=5).map(tuple)


def _kep5504_key(rv: str) -> tuple[int, str]:
    return (len(rv), rv)


@HYPOTHESIS
@given(epoch=EPOCHS, vector=VECTORS)
def test_encode_decode_round_trips_any_uint64_vector(epoch: int, vector: tuple[int, ...]) -> None:
    rv = encode(epoch, vector)

    assert decode(rv, epoch=epoch, slots=len(vector)) == vector
    assert len(rv) == proxy_rv_length(len(vector))
    assert is_proxy_rv(rv, len(vector))


@HYPOTHESIS
@given(epoch=EPOCHS, vector=VECTORS)
def test_encoded_rv_is_a_positive_decimal_integer_without_leading_zeros(epoch: int, vector: tuple[int, ...]) -> None:
    rv = encode(epoch, vector)

    assert rv.isascii() and rv.isdigit()
    assert rv[0] != "0"
    assert int(rv) > 0
    assert str(int(rv)) == rv


@st.composite
def _increase_sequences(draw: st.DrawFn) -> tuple[int, tuple[int, ...], list[tuple[int, int]]]:
    epoch = draw(EPOCHS)
    start = draw(st.lists(st.integers(0, 2**40), min_size=1, max_size=5).map(tuple))
    steps = draw(
        st.lists(
            st.tuples(st.integers(0, len(start) - 1), st.one_of(st.integers(1, 10), st.integers(1, 2**62))),
            min_size=1,
            max_size=30,
        )
    )
    return epoch, start, steps


@HYPOTHESIS
@given(seq=_increase_sequences())
def test_single_slot_increases_strictly_increase_the_encoded_rv(
    seq: tuple[int, tuple[int, ...], list[tuple[int, int]]],
) -> None:
    epoch, vector, steps = seq
    previous = encode(epoch, vector)
    for slot, delta in steps:
        vector = with_slot(vector, slot, min(vector[slot] + delta, U64))
        if vector[slot] == U64 and decode(previous, epoch=epoch, slots=len(vector))[slot] == U64:
            continue  # saturated: no increase happened
        current = encode(epoch, vector)
        assert compare(current, previous) == 1
        assert compare(previous, current) == -1
        assert _kep5504_key(current) > _kep5504_key(previous)
        assert int(current) > int(previous)
        previous = current


@HYPOTHESIS
@given(a=st.from_regex(r"[1-9][0-9]{0,60}", fullmatch=True), b=st.from_regex(r"[1-9][0-9]{0,60}", fullmatch=True))
def test_compare_orders_canonical_decimals_like_integers(a: str, b: str) -> None:
    expected = (int(a) > int(b)) - (int(a) < int(b))

    assert compare(a, b) == expected
    assert compare(b, a) == -expected
    assert compare(a, a) == 0


def test_compare_is_by_length_then_lexical() -> None:
    assert compare("9", "10") == -1
    assert compare("100", "99") == 1
    assert compare("123", "124") == -1
    assert compare("124", "124") == 0


def test_vector_helpers_replace_one_slot() -> None:
    assert with_slot((1, 2, 3), 1, 9) == (1, 9, 3)
    assert single_slot(3, 2, 7) == (0, 0, 7)


def test_known_encoding_layout() -> None:
    assert encode(7, (5, 12)) == "1007" + "5".zfill(20) + "12".zfill(20)
    assert encode(0, ()) == "1000"


@pytest.mark.parametrize(("epoch", "vector"), [(-1, (1,)), (1000, (1,)), (1, (-1,)), (1, (10**20,))])
def test_encode_rejects_out_of_range_values(epoch: int, vector: tuple[int, ...]) -> None:
    with pytest.raises(RVError):
        encode(epoch, vector)


GOOD = encode(3, (11, 22))


@pytest.mark.parametrize(
    ("rv", "epoch", "slots"),
    [
        pytest.param(GOOD, 4, 2, id="other-epoch"),
        pytest.param(GOOD, 3, 1, id="fewer-slots"),
        pytest.param(GOOD, 3, 3, id="more-slots"),
        pytest.param(GOOD[:-1], 3, 2, id="truncated"),
        pytest.param(GOOD + "0", 3, 2, id="extra-digit"),
        pytest.param("0" + GOOD[1:], 3, 2, id="leading-zero-same-length"),
        pytest.param("0" + GOOD[:-1], 3, 2, id="leading-zero-shifted"),
        pytest.param("00" + GOOD[2:], 3, 2, id="two-leading-zeros"),
        pytest.param("2" + GOOD[1:], 3, 2, id="wrong-leading-digit"),
        pytest.param(GOOD[:-1] + "x", 3, 2, id="letter"),
        pytest.param(GOOD[:-1] + " ", 3, 2, id="space"),
        pytest.param("+" + GOOD[1:], 3, 2, id="sign"),
        pytest.param(GOOD[:-1] + "\u0663", 3, 2, id="arabic-indic-digit"),
        pytest.param(GOOD[:-1] + "\u00b2", 3, 2, id="superscript-digit"),
        pytest.param("", 3, 2, id="empty"),
        pytest.param("0", 3, 2, id="zero"),
        pytest.param("12345", 3, 2, id="native-rv"),
    ],
)
def test_decode_rejects_anything_but_a_proxy_rv_of_this_epoch_and_width(rv: str, epoch: int, slots: int) -> None:
    with pytest.raises(RVError):
        decode(rv, epoch=epoch, slots=slots)


@HYPOTHESIS
@given(text=st.text(max_size=100), epoch=EPOCHS, slots=st.integers(1, 5))
def test_decode_raises_only_rverror_and_is_proxy_rv_never_raises(text: str, epoch: int, slots: int) -> None:
    shaped = is_proxy_rv(text, slots)
    try:
        vector = decode(text, epoch=epoch, slots=slots)
    except RVError:
        return
    assert shaped
    assert encode(epoch, vector) == text


@pytest.mark.parametrize("rv", [encode(1, (5, 6)), encode(999, (0, 0)), "1" + "0" * 43])
def test_is_proxy_rv_accepts_proxy_shaped_rvs(rv: str) -> None:
    assert is_proxy_rv(rv, 2)


@pytest.mark.parametrize("rv", ["", "0", "12345", encode(1, (5,)), "0" + encode(1, (5, 6))[1:], "x" * 44,
                                encode(1, (5, 6))[:-1] + "\u0663"])
def test_is_proxy_rv_rejects_other_shapes(rv: str) -> None:
    assert not is_proxy_rv(rv, 2)


# --- to_native --------------------------------------------------------------------------------


@pytest.mark.parametrize("rv", ["", "0", "12345", "abc", encode(1, (5,)), encode(1, (5, 6, 7))])
def test_to_native_returns_none_for_rvs_not_shaped_like_proxy_rvs(rv: str) -> None:
    # A native RV (from a single-partition protobuf answer), "0" and garbage go to the partition as they are.
    assert to_native(rv, epoch=1, slots=2, slot=0) is None


def test_to_native_translates_a_proxy_rv_to_the_slots_native_rv() -> None:
    rv = encode(1, (123, 456))

    assert to_native(rv, epoch=1, slots=2, slot=0) == "123"
    assert to_native(rv, epoch=1, slots=2, slot=1) == "456"


def test_to_native_rejects_a_vector_that_does_not_know_the_partition() -> None:
    rv = encode(1, single_slot(2, 1, 456))

    with pytest.raises(RVError):
        to_native(rv, epoch=1, slots=2, slot=0)


def test_to_native_rejects_a_proxy_rv_of_another_epoch() -> None:
    with pytest.raises(RVError):
        to_native(encode(2, (1, 2)), epoch=1, slots=2, slot=0)


@HYPOTHESIS
@given(epoch=EPOCHS, vector=VECTORS, data=st.data())
def test_to_native_of_an_encoded_vector_is_the_slot_value_as_a_decimal_string(
    epoch: int, vector: tuple[int, ...], data: st.DataObject
) -> None:
    slot = data.draw(st.integers(0, len(vector) - 1))
    rv = encode(epoch, vector)

    if vector[slot] == 0:
        with pytest.raises(RVError):
            to_native(rv, epoch=epoch, slots=len(vector), slot=slot)
    else:
        assert to_native(rv, epoch=epoch, slots=len(vector), slot=slot) == str(vector[slot])
