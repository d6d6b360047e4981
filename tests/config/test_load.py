"""Loading and validating the proxy configuration file (config.load, config.models).

Every bad configuration must fail with a `ConfigError` whose message is one line naming the
offending field ("Config errors fail start-up with one line naming the field").
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pydantic
import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from config import ConfigError, PartitionRole, load_config, parse_config

VALID_YAML = """\
listen:
  address: 0.0.0.0
  port: 7443
partitions:
  - {name: tp1, role: tenant, kubeconfig: kubeconfigs/tp1.yaml}
  - {name: tp2, role: tenant, kubeconfig: kubeconfigs/tp2.yaml}
  - {name: rp1, role: resource, kubeconfig: /etc/partition-proxy/rp1.yaml}
  - {name: rp2, role: resource, kubeconfig: ../rp2.yaml}
system_partition: tp1
tenants:
  namespace_to_tenant: prefix
  separator: "-"
  namespaces: {team-x: acme}
  partitions: {acme: tp2}
  ranges:
    - {first: a, last: m, partition: tp1}
    - {first: n, last: z, partition: tp2}
  default_partition: tp1
nodes:
  placement: prefix
  prefixes: {"rp1-": rp1, "rp2-": rp2}
  regex:
    - {pattern: "^rp1-.*", partition: rp1}
resource_versions: {refresh_seconds: 7, slot_bits: 20}
upstream: {connect_timeout_seconds: 2.5, request_timeout_seconds: 30}
"""


def _valid() -> dict[str, Any]:
    return yaml.safe_load(VALID_YAML)


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "proxy.yaml"
    path.write_text(text)
    return path


def _write_doc(tmp_path: Path, doc: Any) -> Path:
    return _write(tmp_path, yaml.safe_dump(doc))


def _assert_one_line_naming(err: ConfigError, field: str) -> None:
    message = str(err)
    assert field in message, message
    assert "\n" not in message, message
    assert len(message.splitlines()) == 1, message


# --- valid configurations ---------------------------------------------------------------------


def test_valid_yaml_config_loads_every_section(tmp_path: Path) -> None:
    cfg = load_config(_write(tmp_path, VALID_YAML))

    assert cfg.listen.address == "0.0.0.0"
    assert cfg.listen.port == 7443
    assert [p.name for p in cfg.partitions] == ["tp1", "tp2", "rp1", "rp2"]
    assert cfg.system_partition == "tp1"
    assert cfg.tenants.namespaces == {"team-x": "acme"}
    assert cfg.tenants.partitions == {"acme": "tp2"}
    assert [(r.first, r.last, r.partition) for r in cfg.tenants.ranges] == [("a", "m", "tp1"), ("n", "z", "tp2")]
    assert cfg.tenants.default_partition == "tp1"
    assert cfg.nodes.placement == "prefix"
    assert cfg.nodes.prefixes == {"rp1-": "rp1", "rp2-": "rp2"}
    assert cfg.resource_versions.refresh_seconds == 7
    assert cfg.resource_versions.slot_bits == 20
    assert cfg.upstream.connect_timeout_seconds == 2.5
    assert cfg.upstream.request_timeout_seconds == 30


def test_partition_names_by_role_keep_configuration_order(tmp_path: Path) -> None:
    cfg = load_config(_write(tmp_path, VALID_YAML))

    assert cfg.names(PartitionRole.TENANT) == ("tp1", "tp2")
    assert cfg.names(PartitionRole.RESOURCE) == ("rp1", "rp2")


def test_relative_kubeconfig_paths_resolve_against_the_config_files_directory(tmp_path: Path) -> None:
    conf_dir = tmp_path / "etc" / "proxy"
    conf_dir.mkdir(parents=True)
    path = conf_dir / "proxy.yaml"
    path.write_text(VALID_YAML)

    kubeconfigs = {p.name: p.kubeconfig for p in load_config(path).partitions}

    assert kubeconfigs["tp1"] == conf_dir / "kubeconfigs" / "tp1.yaml"
    assert kubeconfigs["tp2"] == conf_dir / "kubeconfigs" / "tp2.yaml"
    assert kubeconfigs["rp2"] == conf_dir / ".." / "rp2.yaml"
    assert kubeconfigs["rp2"].resolve() == (tmp_path / "etc" / "rp2.yaml").resolve()


def test_absolute_kubeconfig_paths_are_kept_as_written(tmp_path: Path) -> None:
    kubeconfigs = {p.name: p.kubeconfig for p in load_config(_write(tmp_path, VALID_YAML)).partitions}

    assert kubeconfigs["rp1"] == Path("/etc/partition-proxy/rp1.yaml")


def test_minimal_config_gets_documented_defaults() -> None:
    cfg = parse_config(
        {
            "partitions": [
                {"name": "tp1", "role": "tenant", "kubeconfig": "/k/tp1"},
                {"name": "rp1", "role": "resource", "kubeconfig": "/k/rp1"},
            ],
            "system_partition": "tp1",
        }
    )

    assert cfg.listen.address == "127.0.0.1"
    assert cfg.listen.port == 6443
    assert cfg.tenants.namespace_to_tenant == "prefix"
    assert cfg.tenants.separator == "-"
    assert cfg.nodes.placement == "hash"
    assert cfg.resource_versions.slot_bits is None
    assert cfg.resource_versions.table_name == "partition-proxy-resource-versions"


def test_loaded_config_is_frozen(tmp_path: Path) -> None:
    cfg = load_config(_write(tmp_path, VALID_YAML))

    with pytest.raises(pydantic.ValidationError, match="frozen"):
        cfg.system_partition = "tp2"  # type: ignore[misc]
    assert cfg.system_partition == "tp1"


# --- invalid configurations: one line naming the field ----------------------------------------


def _mutate(fn: Any) -> dict[str, Any]:
    doc = copy.deepcopy(_valid())
    fn(doc)
    return doc


def _set(path: tuple[Any, ...], value: Any) -> Any:
    def apply(doc: dict[str, Any]) -> None:
        target: Any = doc
        for key in path[:-1]:
            target = target[key]
        target[path[-1]] = value

    return apply


BAD_DOCS = [
    pytest.param(_set(("partitions", 1, "role"), "compute"), "partitions.1.role", id="unknown-role"),
    pytest.param(_set(("rv_epoc",), 2), "rv_epoc", id="unknown-top-level-key"),
    pytest.param(_set(("tenants", "seperator"), "_"), "tenants.seperator", id="unknown-nested-key-typo"),
    pytest.param(_set(("partitions", 0, "kubeconfg"), "/x"), "partitions.0.kubeconfg", id="unknown-partition-key"),
    pytest.param(
        _set(("partitions", 1), {"name": "tp1", "role": "tenant", "kubeconfig": "/x"}),
        "partitions",
        id="duplicate-partition",
    ),
    pytest.param(_set(("system_partition",), "rp1"), "system_partition", id="system-partition-is-resource"),
    pytest.param(_set(("system_partition",), "tp9"), "system_partition", id="system-partition-unknown"),
    pytest.param(
        _set(("tenants", "ranges", 1, "partition"), "tp9"), "tenants.ranges.1.partition", id="range-unknown-partition"
    ),
    pytest.param(
        _set(("tenants", "ranges", 0, "partition"), "rp1"), "tenants.ranges.0.partition", id="range-resource-partition"
    ),
    pytest.param(_set(("tenants", "partitions", "acme"), "rp2"), "tenants.partitions.acme", id="tenant-map-to-rp"),
    pytest.param(_set(("tenants", "default_partition"), "nope"), "tenants.default_partition", id="default-unknown"),
    pytest.param(_set(("nodes", "prefixes", "rp1-"), "tp1"), "nodes.prefixes.rp1-", id="node-prefix-to-tp"),
    pytest.param(_set(("nodes", "regex", 0, "pattern"), "^rp1-(.*"), "nodes.regex.0.pattern", id="bad-regex"),
    pytest.param(_set(("nodes", "regex", 0, "partition"), "tp2"), "nodes.regex.0.partition", id="regex-to-tp"),
    pytest.param(_set(("nodes", "placement"), "random"), "nodes.placement", id="unknown-placement"),
    pytest.param(_set(("tenants", "namespace_to_tenant"), "label"), "tenants.namespace_to_tenant", id="unknown-ns-mode"),
    pytest.param(_set(("partitions", 2, "name"), "RP_1"), "partitions.2.name", id="partition-name-not-dns-label"),
    pytest.param(_set(("resource_versions", "slot_bits"), 65), "resource_versions.slot_bits", id="slot-bits-out-of-range"),
    pytest.param(_set(("resource_versions", "slot_bits"), 60), "resource_versions.slot_bits", id="slot-bits-over-128-bits"),
    pytest.param(_set(("listen", "port"), 70000), "listen.port", id="port-out-of-range"),
    pytest.param(_set(("tenants", "ranges", 0, "first"), "zz"), "tenants.ranges.0", id="range-first-after-last"),
    pytest.param(_set(("partitions",), []), "partitions", id="no-partitions"),
    pytest.param(
        _set(("partitions",), [{"name": "tp1", "role": "tenant", "kubeconfig": "/x"}]), "partitions", id="no-rp"
    ),
    pytest.param(lambda doc: doc.pop("system_partition"), "system_partition", id="missing-system-partition"),
]


@pytest.mark.parametrize(("mutate", "field"), BAD_DOCS)
def test_bad_config_file_raises_one_line_config_error_naming_the_field(
    tmp_path: Path, mutate: Any, field: str
) -> None:
    path = _write_doc(tmp_path, _mutate(mutate))

    with pytest.raises(ConfigError) as info:
        load_config(path)

    _assert_one_line_naming(info.value, field)


@pytest.mark.parametrize(("mutate", "field"), BAD_DOCS)
def test_bad_config_document_raises_one_line_config_error_naming_the_field(mutate: Any, field: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_config(_mutate(mutate))

    _assert_one_line_naming(info.value, field)


def test_misspelt_required_key_names_the_missing_field() -> None:
    doc = _valid()
    doc["system_partiton"] = doc.pop("system_partition")

    with pytest.raises(ConfigError) as info:
        parse_config(doc)

    _assert_one_line_naming(info.value, "system_partition")


def test_missing_file_raises_one_line_config_error(tmp_path: Path) -> None:
    missing = tmp_path / "nope.yaml"

    with pytest.raises(ConfigError) as info:
        load_config(missing)

    _assert_one_line_naming(info.value, "config")
    assert str(missing) in str(info.value)


def test_directory_instead_of_file_raises_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as info:
        load_config(tmp_path)

    _assert_one_line_naming(info.value, "config")


@pytest.mark.parametrize(
    "text",
    [
        pytest.param("partitions: [\n  {name: tp1\n", id="unclosed-flow"),
        pytest.param("partitions:\n  - name: tp1\n   role: tenant\n", id="bad-indent"),
        pytest.param("a: b: c\n", id="mapping-in-scalar"),
        pytest.param("key: \"unterminated\n", id="unterminated-string"),
        pytest.param("\tpartitions: []\n", id="tab-indent"),
    ],
)
def test_invalid_yaml_raises_one_line_config_error(tmp_path: Path, text: str) -> None:
    with pytest.raises(ConfigError) as info:
        load_config(_write(tmp_path, text))

    _assert_one_line_naming(info.value, "config")
    assert "YAML" in str(info.value)


@pytest.mark.parametrize("text", ["", "- a\n- b\n", "just a string\n", "42\n"])
def test_document_that_is_not_a_mapping_raises_one_line_config_error(tmp_path: Path, text: str) -> None:
    with pytest.raises(ConfigError) as info:
        load_config(_write(tmp_path, text))

    _assert_one_line_naming(info.value, "config")


def test_unknown_key_containing_a_line_break_still_gives_one_line(tmp_path: Path) -> None:
    text = VALID_YAML + '"rv_\\nepoch": 3\n'

    with pytest.raises(ConfigError) as info:
        load_config(_write(tmp_path, text))

    _assert_one_line_naming(info.value, "rv_")


def test_several_errors_report_the_first_and_count_the_rest() -> None:
    doc = _valid()
    doc["partitions"][0]["role"] = "compute"
    doc["partitions"][1]["role"] = "compute"

    with pytest.raises(ConfigError) as info:
        parse_config(doc)

    _assert_one_line_naming(info.value, "partitions.0.role")
    assert "(and 1 more)" in str(info.value)


@settings(max_examples=200, deadline=None)
@given(key=st.text(min_size=1, max_size=20).filter(lambda k: k not in _valid()))
def test_any_unknown_top_level_key_gives_one_line(key: str) -> None:
    doc = _valid()
    doc[key] = 1

    with pytest.raises(ConfigError) as info:
        parse_config(doc)

    message = str(info.value)
    assert len(message.splitlines()) == 1, message
    assert "Extra inputs are not permitted" in message
