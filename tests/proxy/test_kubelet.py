"""The pure parts of a pod's log through the proxy (proxy.handlers.kubelet): which container, which
kubelet address."""

from __future__ import annotations

from typing import Any

from proxy.handlers.kubelet import kubelet_address, pick_container


def a_pod(*containers: str, default: str = "", init: tuple[str, ...] = ()) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": "p"}
    if default:
        meta["annotations"] = {"kubectl.kubernetes.io/default-container": default}
    return {"metadata": meta, "spec": {"containers": [{"name": c} for c in containers], "initContainers": [{"name": c} for c in init]}}


def test_the_container_is_the_asked_one_the_default_or_the_only_one() -> None:
    assert pick_container(a_pod("app"), "") == ("app", "")
    assert pick_container(a_pod("app", "side"), "side") == ("side", "")
    assert pick_container(a_pod("app", "side", default="side"), "") == ("side", "")
    assert pick_container(a_pod("app", init=("setup",)), "setup") == ("setup", "")
    assert pick_container(a_pod("app", "side"), "") == (None, "a container name must be specified for pod p, choose one of: [app side]")
    assert pick_container(a_pod("app"), "nope") == (None, "container nope is not valid for pod p")


def test_the_kubelet_address_is_the_first_preferred_type_at_the_kubelet_port() -> None:
    node = {"status": {"addresses": [{"type": "Hostname", "address": "n1"}, {"type": "InternalIP", "address": "10.0.0.7"},
                                     {"type": "InternalIP", "address": "fd00::7"}],
                       "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}}}}
    assert kubelet_address(node, ("InternalIP", "Hostname")) == "10.0.0.7:10250"
    assert kubelet_address(node, ("Hostname",)) == "n1:10250"
    assert kubelet_address({"status": {"addresses": [{"type": "InternalIP", "address": "fd00::7"}], "daemonEndpoints": {"kubeletEndpoint": {"Port": 1}}}},
                           ("InternalIP",)) == "[fd00::7]:1"
    assert kubelet_address({"status": {"addresses": node["status"]["addresses"]}}, ("InternalIP",)) is None  # no port
    assert kubelet_address(node, ("ExternalIP",)) is None


def test_exec_options_become_the_kubelets_parameters() -> None:
    from proxy.handlers.kubelet import offered_protocols, stream_query

    assert stream_query("command=sh&command=-c&command=echo+hi&stdin=true&stdout=true&stderr=false&tty=1&container=app") == (
        "command=sh&command=-c&command=echo+hi&input=1&output=1&tty=1"
    )
    assert offered_protocols({"Upgrade": "websocket", "Sec-WebSocket-Protocol": "v5.channel.k8s.io, v4.channel.k8s.io"}) == (
        "v5.channel.k8s.io", "v4.channel.k8s.io")
    assert offered_protocols({"Upgrade": "SPDY/3.1", "X-Stream-Protocol-Version": "v4.channel.k8s.io"}) == ()


def test_a_spdy_upgrade_offers_every_stream_protocol_header_in_order() -> None:
    from multidict import CIMultiDict

    from proxy.handlers.kubelet import spdy_protocols

    headers = CIMultiDict([("Connection", "Upgrade"), ("Upgrade", "SPDY/3.1"), ("X-Stream-Protocol-Version", "v4.channel.k8s.io"),
                           ("X-Stream-Protocol-Version", "v3.channel.k8s.io"), ("x-stream-protocol-version", "v2.channel.k8s.io, channel.k8s.io")])
    assert spdy_protocols(headers) == ("v4.channel.k8s.io", "v3.channel.k8s.io", "v2.channel.k8s.io", "channel.k8s.io")
    assert spdy_protocols(CIMultiDict({"Upgrade": "websocket", "X-Stream-Protocol-Version": "v4.channel.k8s.io"})) == ()
    assert spdy_protocols(CIMultiDict({"X-Stream-Protocol-Version": "portforward.k8s.io"})) == ()  # no upgrade asked
