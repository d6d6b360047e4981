"""Routing by a service-account token's claims (routing.tokens, routing.bodies.body_token_namespace,
routing.decide for TokenReviews): a token is reviewed by the tenant partition that issued it."""

from __future__ import annotations

import base64

import orjson
from hypothesis import given
from hypothesis import strategies as st

from routing.bodies import body_facts, body_name, body_token_namespace
from routing.decide import Route, RouteKind, decide
from routing.protobuf import Envelope, encode_envelope, token_review_token
from routing.requestinfo import parse_request_info
from routing.tokens import service_account_namespace
from tests.routing.test_decide import STATE

REVIEWS = "/apis/authentication.k8s.io/v1/tokenreviews"
PROTOBUF = "application/vnd.kubernetes.protobuf"


def _segment(doc: object) -> str:
    return base64.urlsafe_b64encode(orjson.dumps(doc)).rstrip(b"=").decode()


def jwt(claims: object) -> str:
    return f"{_segment({'alg': 'RS256', 'kid': 'k'})}.{_segment(claims)}.c2lnbmF0dXJl"


BOUND = {  # the claims kube-apiserver 1.36 writes into a TokenRequest's token
    "aud": ["https://tp2.partitions.local"], "iss": "https://tp2.partitions.local", "sub": "system:serviceaccount:nova-web:e2e-sa",
    "kubernetes.io": {"namespace": "nova-web", "serviceaccount": {"name": "e2e-sa", "uid": "u-1"}},
}
LEGACY = {"iss": "kubernetes/serviceaccount", "sub": "system:serviceaccount:nova-web:builder",
          "kubernetes.io/serviceaccount/namespace": "nova-web", "kubernetes.io/serviceaccount/service-account.name": "builder"}


def test_a_bound_token_names_its_namespace() -> None:
    assert service_account_namespace(jwt(BOUND)) == "nova-web"


def test_a_legacy_secret_token_names_its_namespace() -> None:
    assert service_account_namespace(jwt(LEGACY)) == "nova-web"


def test_the_subject_alone_names_the_namespace() -> None:
    assert service_account_namespace(jwt({"sub": "system:serviceaccount:bravo-web:default"})) == "bravo-web"


def test_the_bound_claim_wins_over_the_subject() -> None:
    claims = {"sub": "system:serviceaccount:bravo-web:x", "kubernetes.io": {"namespace": "nova-web"}}
    assert service_account_namespace(jwt(claims)) == "nova-web"


def test_tokens_that_name_no_service_account_name_no_namespace() -> None:
    assert service_account_namespace(jwt({"sub": "alice", "iss": "https://oidc.example"})) == ""
    assert service_account_namespace(jwt({"sub": "system:serviceaccount:only-namespace"})) == ""
    assert service_account_namespace(jwt(["not", "claims"])) == ""
    assert service_account_namespace("abcdef.0123456789abcdef") == ""  # a bootstrap token
    assert service_account_namespace("a.!!!.c") == ""
    assert service_account_namespace(f"a.{'A' * 20000}.c") == ""  # longer than any service-account token


@given(st.text())
def test_any_token_gives_a_string_and_never_raises(token: str) -> None:
    assert isinstance(service_account_namespace(token), str)


def test_a_json_token_review_body_names_its_tokens_namespace() -> None:
    body = orjson.dumps({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "spec": {"token": jwt(BOUND)}})
    assert body_token_namespace(body, "application/json") == "nova-web"
    assert body_token_namespace(b"{not json", "application/json") == ""
    assert body_token_namespace(b'{"spec": {"token": 7}}', "application/json") == ""


def _ld(number: int, payload: bytes) -> bytes:
    length, head = len(payload), bytearray()
    while True:
        byte, length = length & 0x7F, length >> 7
        head.append(byte | (0x80 if length else 0))
        if not length:
            break
    return bytes([number << 3 | 2]) + bytes(head) + payload


def test_a_protobuf_token_review_body_names_its_tokens_namespace() -> None:
    token = jwt(BOUND).encode()
    raw = _ld(1, b"") + _ld(2, _ld(1, token) + _ld(2, b"aud"))  # TokenReview{metadata, spec{token, audiences}}
    body = encode_envelope(Envelope("authentication.k8s.io/v1", "TokenReview", raw))
    assert token_review_token(body) == token.decode()
    assert body_token_namespace(body, PROTOBUF) == "nova-web"
    assert body_token_namespace(b"k8s\x00\x0a", PROTOBUF) == ""  # truncated


def test_a_token_review_is_decided_after_its_body_is_read() -> None:
    info = parse_request_info("POST", REVIEWS, {})
    assert decide(info, STATE).kind is RouteKind.NEEDS_BODY


def test_a_token_review_goes_to_the_partition_owning_the_tokens_namespace() -> None:
    info = parse_request_info("POST", REVIEWS, {})
    assert decide(info, STATE, body_name="", token_namespace="nova-web") == Route(RouteKind.FORWARD, ("tp2",), ())
    assert decide(info, STATE, body_name="", token_namespace="bravo-web") == Route(RouteKind.FORWARD, ("tp1",), ())


def test_a_token_review_of_another_token_goes_to_the_system_partition() -> None:
    info = parse_request_info("POST", REVIEWS, {})
    assert decide(info, STATE, body_name="", token_namespace="") == Route(RouteKind.FORWARD, ("tp1",), ())


def test_body_facts_are_the_name_and_the_token_namespace_read_at_once() -> None:
    review = orjson.dumps({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview",
                           "metadata": {"name": "r"}, "spec": {"token": jwt(BOUND)}})
    assert body_facts(review, "application/json") == ("r", "nova-web")
    assert body_facts(review, "application/json") == (body_name(review, "application/json"),
                                                       body_token_namespace(review, "application/json"))
    assert body_facts(b"{not json", "application/json") == ("", "")
