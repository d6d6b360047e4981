"""Byte-level resourceVersion rewriting of compact JSON (routing.rvrewrite)."""

from __future__ import annotations

import re
from typing import Any

import orjson
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from routing.rvrewrite import rewrite_rvs, set_all_rvs

HYPOTHESIS = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def plus_one(digits: bytes) -> bytes:
    return str(int(digits) + 1).encode()


def test_rewrites_the_resource_version_key_at_every_depth() -> None:
    body = orjson.dumps(
        {
            "metadata": {"resourceVersion": "10"},
            "items": [{"metadata": {"name": "a", "resourceVersion": "7"}}],
            "involvedObject": {"kind": "Pod", "resourceVersion": "3"},
        }
    )

    doc = orjson.loads(rewrite_rvs(body, plus_one))

    assert doc["metadata"]["resourceVersion"] == "11"
    assert doc["items"][0]["metadata"]["resourceVersion"] == "8"
    assert doc["involvedObject"]["resourceVersion"] == "4"


def test_translate_returning_none_keeps_the_value() -> None:
    body = b'{"metadata":{"resourceVersion":"0"},"items":[{"metadata":{"resourceVersion":"5"}}]}'

    out = rewrite_rvs(body, lambda d: None if d == b"0" else b"99")

    assert out == b'{"metadata":{"resourceVersion":"0"},"items":[{"metadata":{"resourceVersion":"99"}}]}'


def test_escaped_resource_version_inside_a_string_value_is_not_rewritten() -> None:
    applied = '{"apiVersion":"v1","kind":"Pod","metadata":{"name":"a","resourceVersion":"5"}}'
    body = orjson.dumps(
        {"metadata": {"resourceVersion": "12",
                      "annotations": {"kubectl.kubernetes.io/last-applied-configuration": applied}}}
    )
    assert b'\\"resourceVersion\\":\\"5\\"' in body

    doc = orjson.loads(rewrite_rvs(body, plus_one))

    assert doc["metadata"]["resourceVersion"] == "13"
    assert doc["metadata"]["annotations"]["kubectl.kubernetes.io/last-applied-configuration"] == applied


def test_string_value_equal_to_the_key_name_is_not_rewritten() -> None:
    body = orjson.dumps({"a": "resourceVersion", "b": "5", "c": ["resourceVersion", "6"]})

    assert rewrite_rvs(body, plus_one) == body


def test_non_numeric_resource_versions_are_left_alone() -> None:
    body = b'{"metadata":{"resourceVersion":""},"x":{"resourceVersion":"abc"},"y":{"resourceVersion":5}}'

    assert rewrite_rvs(body, plus_one) == body


def test_set_all_rvs_stamps_every_resource_version_key_and_nothing_else() -> None:
    applied = '{"metadata":{"resourceVersion":"5"}}'
    body = orjson.dumps({"object": {"metadata": {"resourceVersion": "12", "annotations": {"x": applied}},
                                    "ref": {"resourceVersion": "3"}}})

    doc = orjson.loads(set_all_rvs(body, b"1001"))

    assert doc["object"]["metadata"]["resourceVersion"] == "1001"
    assert doc["object"]["ref"]["resourceVersion"] == "1001"
    assert doc["object"]["metadata"]["annotations"]["x"] == applied


# --- hypothesis: the byte rewrite equals a rewrite of the decoded document ---------------------

_KEYS = st.sampled_from(["resourceVersion", "metadata", "name", "items", "x", "resourceversion", "rv"])
_STRINGS = st.one_of(
    st.from_regex(r"[0-9]{1,12}", fullmatch=True),
    st.text(max_size=30),
    st.sampled_from(['"resourceVersion":"5"', '{"resourceVersion":"7"}', "resourceVersion", '\\"', "\\",
                     '\\","resourceVersion":"9']),
)
_JSON = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(-5, 10**6), _STRINGS),
    lambda children: st.one_of(st.lists(children, max_size=4), st.dictionaries(_KEYS | st.text(max_size=8),
                                                                                children, max_size=4)),
    max_leaves=25,
)
_DIGITS = re.compile(r"[0-9]+")


def _rewrite_decoded(value: Any) -> Any:
    if isinstance(value, dict):
        out = {}
        for key, child in value.items():
            if key == "resourceVersion" and isinstance(child, str) and _DIGITS.fullmatch(child):
                out[key] = str(int(child) + 1)
            else:
                out[key] = _rewrite_decoded(child)
        return out
    if isinstance(value, list):
        return [_rewrite_decoded(v) for v in value]
    return value


@HYPOTHESIS
@given(doc=_JSON)
def test_byte_rewrite_changes_exactly_the_resource_version_keys(doc: Any) -> None:
    body = orjson.dumps(doc)

    rewritten = rewrite_rvs(body, plus_one)

    assert orjson.loads(rewritten) == _rewrite_decoded(doc)
