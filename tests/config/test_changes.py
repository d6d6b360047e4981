"""Which changes of the partition set a running proxy takes (config.changes), and the states
of a partition (config.models.PartitionState)."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from config import ConfigError, parse_config
from config.changes import partition_set_version, runtime_change

BASE: dict[str, Any] = {
    "partitions": [
        {"name": "tp1", "role": "tenant", "kubeconfig": "/k/tp1"},
        {"name": "rp1", "role": "resource", "kubeconfig": "/k/rp1"},
    ],
    "system_partition": "tp1",
}


def with_changes(**changes: Any) -> dict[str, Any]:
    doc = copy.deepcopy(BASE)
    doc.update(changes)
    return doc


def grown(*extra: dict[str, Any], base: dict[str, Any] = BASE) -> dict[str, Any]:
    doc = copy.deepcopy(base)
    doc["partitions"] += list(extra)
    return doc


RP2 = {"name": "rp2", "role": "resource", "kubeconfig": "/k/rp2"}


def test_appended_partitions_join_and_other_sections_wait_for_a_restart() -> None:
    running = parse_config(BASE)
    loaded = parse_config({**grown(RP2), "listen": {"port": 7443}})
    change = runtime_change(running, loaded)
    assert change.joined == ("rp2",)
    assert change.ignored == ("listen",)
    assert change.config.listen.port == 6443  # kept until a restart
    assert [p.name for p in change.config.partitions] == ["tp1", "rp1", "rp2"]
    assert partition_set_version(change.config) != partition_set_version(running)
    assert partition_set_version(change.config) == partition_set_version(parse_config(grown(RP2)))


@pytest.mark.parametrize(
    ("loaded", "message"),
    [
        (with_changes(partitions=[BASE["partitions"][0], RP2, BASE["partitions"][1]]), "partitions.1: partition 'rp1' moved"),
        (grown({"name": "tp2", "role": "tenant", "kubeconfig": "/k/tp2"}, base=with_changes(partitions=[BASE["partitions"][0], RP2])),
         "partitions.1: partition 'rp1' is missing"),
        (with_changes(partitions=[BASE["partitions"][0], {**BASE["partitions"][1], "kubeconfig": "/k/other"}]), "keeps its endpoints"),
    ],
)
def test_a_change_that_breaks_append_only_slots_is_refused_naming_the_partition(loaded: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        runtime_change(parse_config(grown(RP2) if "moved" not in message else BASE), parse_config(loaded))


def test_retired_is_for_good() -> None:
    retired = grown({**RP2, "state": "retired"})
    with pytest.raises(ConfigError, match="retired for good"):
        runtime_change(parse_config(retired), parse_config(grown(RP2)))
    change = runtime_change(parse_config(grown(RP2)), parse_config(retired))
    assert change.retired == ("rp2",) and change.state_changes == (("rp2", "active", "retired"),)


@pytest.mark.parametrize(
    ("doc", "message"),
    [
        (with_changes(partitions=[BASE["partitions"][0], {**BASE["partitions"][1], "state": "draining"}]),
         "at least one active resource partition"),
        (grown({**RP2, "state": "retired"}, base=with_changes(nodes={"placement": "prefix", "prefixes": {"rp2-": "rp2"}})),
         "nodes.prefixes.rp2-: partition 'rp2' is retired"),
        (grown({"name": "tp2", "role": "tenant", "kubeconfig": "/k/tp2", "state": "draining"},
               base=with_changes(tenants={"default_partition": "tp2"})), "tenants.default_partition: partition 'tp2' is draining"),
        (with_changes(partitions=[{**BASE["partitions"][0], "state": "bogus"}, BASE["partitions"][1]]), "partitions.0.state"),
    ],
)
def test_states_are_validated_with_one_line_naming_the_field(doc: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        parse_config(doc)
