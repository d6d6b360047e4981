"""The pure parts of replicated writes (proxy.handlers.replicate): the body other TPs get, the Warning
for a copy a TP refused."""

from __future__ import annotations

import orjson
from multidict import CIMultiDict

from proxy.clients.partition import Whole
from proxy.handlers.replicate import _failure, _for_other_partitions


def test_a_replicated_json_body_loses_the_system_partitions_resource_version_and_uid() -> None:
    body = orjson.dumps({"metadata": {"name": "x", "resourceVersion": "12", "uid": "u"}, "value": 1})
    assert orjson.loads(_for_other_partitions(body, "application/json", "") or b"") == {"metadata": {"name": "x"}, "value": 1}
    # an update carries the other partition's own resourceVersion (kube-apiserver refuses an unconditional one)
    assert orjson.loads(_for_other_partitions(body, "application/json", "88") or b"") == {"metadata": {"name": "x", "resourceVersion": "88"}, "value": 1}
    assert _for_other_partitions(b"\x6b\x38\x73\x00", "application/vnd.kubernetes.protobuf", "") == b"\x6b\x38\x73\x00"
    refused = Whole(409, CIMultiDict(), orjson.dumps({"kind": "Status", "reason": "AlreadyExists", "message": 'x "y" already exists'}))
    assert _failure("tp2", refused, delete=False) == "299 - \"not replicated to tp2: 409 AlreadyExists x 'y' already exists\""
    assert _failure("tp2", Whole(404, CIMultiDict(), b"{}"), delete=True) is None


def test_a_listed_definition_becomes_a_create_body_without_what_the_server_sets() -> None:
    from proxy.definitions_sync import creatable

    listed = {"metadata": {"name": "pc", "uid": "u", "resourceVersion": "5", "creationTimestamp": "t", "generation": 1,
                           "managedFields": [{}], "labels": {"a": "b"}}, "value": 7, "status": {"x": 1}}
    assert creatable(listed, "PriorityClass", "scheduling.k8s.io/v1") == {
        "apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": "pc", "labels": {"a": "b"}}, "value": 7}
