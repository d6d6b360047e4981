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


def test_the_ephemeral_range_is_read_from_the_kernel_or_defaults(tmp_path: Path) -> None:
    f = tmp_path / "range"
    f.write_text("40000\t50000\n")
    assert ephemeral_range(f) == (40000, 50000)
    assert ephemeral_range(tmp_path / "missing") == (32768, 60999)
    f.write_text("garbage")
    assert ephemeral_range(f) == (32768, 60999)
