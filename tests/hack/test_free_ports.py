"""The local federation's server ports (hack.federation._free_ports) lie outside the kernel's
ephemeral range, so no outgoing connection can hold one while its server restarts."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from hack import federation
from hack.federation import HOST, SERVER_PORTS, FederationError, _free_ports, ephemeral_range


def test_ports_are_distinct_free_and_outside_the_ephemeral_range() -> None:
    first, last = ephemeral_range()
    ports = _free_ports(50)
    assert len(set(ports)) == 50
    for port in ports:
        assert SERVER_PORTS[0] <= port < SERVER_PORTS[1] and not first <= port <= last
        with socket.socket() as s:
            s.bind((HOST, port))  # free once returned


def test_a_port_in_use_is_never_picked_and_too_few_free_ones_fail(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(federation, "SERVER_PORTS", (20000, 30000))
    port = _free_ports(1)[0]
    monkeypatch.setattr(federation, "SERVER_PORTS", (port, port + 3))
    with socket.socket() as held:
        held.bind((HOST, port))
        held.listen()
        for _ in range(10):
            assert sorted(_free_ports(2)) == [port + 1, port + 2]  # never the held one
        with pytest.raises(FederationError, match="fewer than 3 free loopback ports"):
            _free_ports(3)


def test_a_port_another_process_will_bind_is_never_picked(monkeypatch: pytest.MonkeyPatch) -> None:
    """`make run` picks the partitions' ports before its proxy binds `--port` (hack.run): CI
    once failed with the proxy's port already taken by a partition."""
    monkeypatch.setattr(federation, "SERVER_PORTS", (20000, 30000))
    port = _free_ports(1)[0]
    monkeypatch.setattr(federation, "SERVER_PORTS", (port, port + 3))
    for _ in range(10):
        assert sorted(_free_ports(2, avoid=(port + 1,))) == [port, port + 2]
    with pytest.raises(FederationError, match="fewer than 3 free loopback ports"):
        _free_ports(3, avoid=(port,))


def _free_window(size: int) -> int:
    """The first port of `size` consecutive loopback ports that are all free now."""
    for start in range(20000, 32768 - size, size):
        socks: list[socket.socket] = []
        try:
            for port in range(start, start + size):
                s = socket.socket()
                socks.append(s)
                s.bind((HOST, port))
            return start
        except OSError:
            continue
        finally:
            for s in socks:
                s.close()
    raise AssertionError(f"no {size} consecutive free ports")


def test_a_port_handed_out_before_is_not_handed_out_again_while_others_are_free(monkeypatch: pytest.MonkeyPatch) -> None:
    """The soak picks the ports of the partitions that join minutes later at its start; the
    control plane's kube-controller-manager, picked in between, once took rp3's kube-apiserver
    port (two random picks of 10 of 20 ports are disjoint once in 184,756)."""
    monkeypatch.setattr(federation, "_handed_out", set())
    start = _free_window(20)
    monkeypatch.setattr(federation, "SERVER_PORTS", (start, start + 20))
    first = _free_ports(10)
    second = _free_ports(10)
    assert set(first).isdisjoint(second)
    assert len(set(_free_ports(10))) == 10  # every port was handed out: the range is used again


def test_the_ephemeral_range_is_read_from_the_kernel_or_defaults(tmp_path: Path) -> None:
    f = tmp_path / "range"
    f.write_text("40000\t50000\n")
    assert ephemeral_range(f) == (40000, 50000)
    assert ephemeral_range(tmp_path / "missing") == (32768, 60999)
    f.write_text("garbage")
    assert ephemeral_range(f) == (32768, 60999)
