"""resourceVersion fields in JSON and YAML of any formatting (routing.rvjson, routing.translate)."""

from __future__ import annotations

import json
from typing import Any

import orjson
import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from routing import rv as rvcodec
from routing import translate
from routing.rvjson import BodyError, RVField, find_values, native_rvs, replace_spans, translate_natives, translate_request

HYPOTHESIS = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
CODEC = rvcodec.RVCodec(("tp1", "tp2"))


def to_object(native: int) -> bytes:
    return CODEC.object_rv(1, native).encode()


def pod(rv: str = "205", **extra: Any) -> dict[str, Any]:
    return {"kind": "Pod", "apiVersion": "v1", "metadata": {"name": "p", "namespace": "nova-x", "resourceVersion": rv}, **extra}


FORMATS = {
    "compact": lambda d: orjson.dumps(d),
    "indented-go": lambda d: json.dumps(d, indent=2).encode(),  # kube-apiserver's ?pretty=true
    "spaced": lambda d: json.dumps(d, separators=(" , ", " : ")).encode(),
    "tabs-crlf": lambda d: json.dumps(d, indent="\t").replace("\n", "\r\n").encode(),
}


# --- answers ----------------------------------------------------------------------------------


@pytest.mark.parametrize("fmt", FORMATS)
def test_every_native_rv_in_an_answer_becomes_an_object_rv_whatever_the_formatting(fmt: str) -> None:
    doc = {"kind": "EventList", "apiVersion": "v1", "metadata": {"resourceVersion": "300"},
           "items": [{"metadata": {"resourceVersion": "205"}, "involvedObject": {"resourceVersion": "17"}}]}

    out = json.loads(translate_natives(FORMATS[fmt](doc), to_object))

    assert out["metadata"]["resourceVersion"] == CODEC.object_rv(1, 300)
    assert out["items"][0]["metadata"]["resourceVersion"] == CODEC.object_rv(1, 205)
    assert out["items"][0]["involvedObject"]["resourceVersion"] == CODEC.object_rv(1, 17)


def test_rv_text_inside_string_values_is_never_touched() -> None:
    applied = json.dumps({"metadata": {"resourceVersion": "3"}})
    doc = pod(annotations={"last-applied": applied, "note": 'x\\"resourceVersion": "4"'})

    for fmt in FORMATS.values():
        out = json.loads(translate_natives(fmt(doc), to_object))
        assert out["annotations"] == doc["annotations"]


def test_zero_and_proxy_sized_values_are_left_alone() -> None:
    body = orjson.dumps({"a": {"resourceVersion": "0"}, "b": {"resourceVersion": CODEC.object_rv(0, 9)}})

    assert translate_natives(body, to_object) == body


def test_yaml_answers_are_translated_too() -> None:
    body = yaml.safe_dump(pod(), sort_keys=False).encode().replace(b"'205'", b'"205"')

    out = yaml.safe_load(translate.answer_translator("application/yaml", to_object)(body))  # type: ignore[misc]

    assert out["metadata"]["resourceVersion"] == CODEC.object_rv(1, 205)


@HYPOTHESIS
@given(
    doc=st.recursive(
        st.one_of(st.integers(0, 2**63 - 1).map(str), st.text(max_size=8), st.integers(-(2**63), 2**63 - 1), st.booleans(), st.none()),
        lambda children: st.one_of(
            st.lists(children, max_size=4),
            st.dictionaries(st.sampled_from(["resourceVersion", "metadata", "items", "x", 'q"k', "resource"]), children, max_size=4),
        ),
        max_leaves=25,
    ),
    fmt=st.sampled_from(sorted(FORMATS)),
)
def test_translate_then_decode_round_trips_and_leaves_no_native_rv(doc: Any, fmt: str) -> None:
    body = FORMATS[fmt](doc)

    out = translate_natives(body, to_object)

    assert native_rvs(out) == [] or all(n == 0 for n in native_rvs(out))

    def back(value: Any) -> Any:
        if isinstance(value, dict):
            return {
                k: str(CODEC.decode(v)[1]) if k == "resourceVersion" and isinstance(v, str) and rvcodec.is_proxy_rv(v) else back(v)
                for k, v in value.items()
            }
        if isinstance(value, list):
            return [back(v) for v in value]
        return value

    assert back(json.loads(out)) == doc


# --- locating a watch event's own RV --------------------------------------------------------------


@pytest.mark.parametrize("fmt", FORMATS)
def test_find_values_locates_the_events_own_rv_and_not_a_references(fmt: str) -> None:
    event = {"type": "ADDED", "object": {"kind": "Event", "involvedObject": {"resourceVersion": "1"},
                                          "metadata": {"annotations": {"resourceVersion": "2"}, "resourceVersion": "3"}}}
    body = FORMATS[fmt](event)

    spans = find_values(body, [("object", "metadata", "resourceVersion")], limit=1)

    assert [body[a:b] for a, b in spans] == [b"3"]
    assert json.loads(replace_spans(body, spans, b"99"))["object"]["metadata"]["resourceVersion"] == "99"
    assert json.loads(replace_spans(body, spans, b"99"))["object"]["involvedObject"]["resourceVersion"] == "1"


def test_find_values_follows_array_wildcards() -> None:
    table = {"object": {"rows": [{"object": {"metadata": {"resourceVersion": "1"}}}, {"object": {"metadata": {"resourceVersion": "2"}}}]}}
    body = orjson.dumps(table)

    spans = find_values(body, [("object", "rows", "*", "object", "metadata", "resourceVersion")])

    assert [body[a:b] for a, b in spans] == [b"1", b"2"]


# --- requests -----------------------------------------------------------------------------------

OLD = CODEC.object_rv(1, 205)


def natives(where: RVField, value: str) -> str | None:
    return CODEC.native_for(value, 1)


@pytest.mark.parametrize("fmt", FORMATS)
def test_an_update_body_in_any_formatting_gets_its_own_rv_translated_and_references_kept(fmt: str) -> None:
    ref = rvcodec.object_rv("rp1", 4)
    body = FORMATS[fmt](pod(OLD, involvedObject={"resourceVersion": ref}))

    out = json.loads(translate_request(body, yaml_body=False, delete_options=False, fn=natives))

    assert out["metadata"]["resourceVersion"] == "205"
    assert out["involvedObject"]["resourceVersion"] == ref


def test_json_patch_ops_on_the_rv_are_translated() -> None:
    ops = [{"op": "test", "path": "/metadata/resourceVersion", "value": OLD},
           {"op": "replace", "path": "/metadata/labels/a", "value": OLD}]

    out = json.loads(translate_request(json.dumps(ops).encode(), yaml_body=False, delete_options=False, fn=natives))

    assert out[0]["value"] == "205"
    assert out[1]["value"] == OLD


def test_delete_options_and_eviction_preconditions_are_translated() -> None:
    options = {"preconditions": {"uid": "u", "resourceVersion": OLD}}
    eviction = {"kind": "Eviction", "apiVersion": "policy/v1", "metadata": {"name": "p"}, "deleteOptions": options}

    assert json.loads(translate_request(json.dumps(options).encode(), yaml_body=False, delete_options=True, fn=natives)) == {
        "preconditions": {"uid": "u", "resourceVersion": "205"}
    }
    out = json.loads(translate_request(json.dumps(eviction).encode(), yaml_body=False, delete_options=False, fn=natives))
    assert out["deleteOptions"]["preconditions"]["resourceVersion"] == "205"


def test_a_yaml_apply_body_is_translated_and_sent_as_json() -> None:
    body = f"apiVersion: v1\nkind: Pod\nmetadata:\n  name: p\n  resourceVersion: \"{OLD}\"\n  labels: {{a: 'yes'}}\n".encode()

    out = translate.translate_request_body(body, "application/apply-patch+yaml", delete_options=False,
                                           to_native=lambda v: CODEC.native_for(v, 1))

    assert json.loads(out) == {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "resourceVersion": "205", "labels": {"a": "yes"}}}


def test_a_body_without_a_proxy_sized_number_is_passed_byte_for_byte() -> None:
    body = b'{ "metadata" : { "resourceVersion" : "205" } }  '

    assert translate_request(body, yaml_body=False, delete_options=False, fn=natives) is body


def test_an_rv_that_cannot_be_translated_raises_for_the_caller_to_answer_409() -> None:
    body = orjson.dumps(pod(CODEC.object_rv(0, 5)))  # names tp1; the request goes to tp2

    with pytest.raises(rvcodec.RVError):
        translate_request(body, yaml_body=False, delete_options=False, fn=natives)


def test_an_undecodable_body_with_a_proxy_sized_number_is_a_body_error() -> None:
    with pytest.raises(BodyError):
        translate_request(b"{" + OLD.encode(), yaml_body=False, delete_options=False, fn=natives)


def test_cbor_is_negotiated_away() -> None:
    assert translate.without_cbor("application/cbor") is None
    assert translate.without_cbor("application/cbor, application/json") == "application/json"
    assert translate.without_cbor("application/json") == "application/json"
    assert translate.without_cbor("") == ""


def test_find_own_rv_takes_the_go_struct_order_fast_path_and_falls_back_for_other_orders() -> None:
    from routing.rvjson import find_own_rv

    go_order = b'{"type":"ADDED","object":{"kind":"Pod","metadata":{"name":"p","namespace":"n","uid":"u","resourceVersion":"7","labels":{"a":"b"}}}}'
    sorted_keys = b'{"type":"ADDED","object":{"apiVersion":"x/v1","data":{"metadata":{"resourceVersion":"9"}},"kind":"Thing","metadata":{"annotations":{"k":"v"},"name":"p","resourceVersion":"7"}}}'
    path = ("object", "metadata", "resourceVersion")

    for body in (go_order, sorted_keys):
        span = find_own_rv(body, path, "7")
        assert span is not None and body[span[0] : span[1]] == b"7"
    assert find_own_rv(go_order, path, "8") is None
    assert find_own_rv(b'{"object":{"metadata":{"name":"x\\\\"}}}', path, "1") is None
