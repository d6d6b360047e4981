"""The chart with the real helm: lint and template across Kubernetes versions and a matrix of
values, schema errors that name the field, and what the manifests say (security, probes,
sizing, autoscaling behaviour, the proxy config)."""

from __future__ import annotations

import json
import math
import re
from typing import Any

import pytest
import yaml

from config import parse_config
from config.models import default_caches
from tests.chart.conftest import REPO, Helm, by_kind, rendered_config
from tests.config.test_load import _valid

KUBE_VERSIONS = ["1.33.0", "1.34.0", "1.35.0", "1.36.0"]
SERVICE_MONITOR_API = "monitoring.coreos.com/v1"
NETWORK_POLICY = {
    "enabled": True,
    "ingressFrom": [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "kube-system"}}}],
    "egress": [{"to": [{"ipBlock": {"cidr": "10.0.0.0/8"}}], "ports": [{"port": 6443, "protocol": "TCP"}]}],
}
# name -> (values, --api-versions, kinds rendered)
BASE_KINDS = {"ConfigMap", "Deployment", "Service", "ServiceAccount", "PodDisruptionBudget"}
CASES: dict[str, tuple[dict[str, Any], tuple[str, ...], set[str]]] = {
    "defaults": ({}, (), BASE_KINDS | {"HorizontalPodAutoscaler"}),
    "ha": (
        {
            "replicaCount": 3,
            "autoscaling": {"enabled": False},
            "podDisruptionBudget": {"minAvailable": 2},
            "podAntiAffinity": "hard",
            "networkPolicy": NETWORK_POLICY,
        },
        (),
        BASE_KINDS | {"NetworkPolicy"},
    ),
    "hpa-off": ({"autoscaling": {"enabled": False}}, (), BASE_KINDS),
    "servicemonitor": (
        {"serviceMonitor": {"enabled": True}},
        (SERVICE_MONITOR_API,),
        BASE_KINDS | {"HorizontalPodAutoscaler", "ServiceMonitor"},
    ),
}
MIB = 1024 * 1024
VALUES_YAML = REPO / "charts" / "partition-proxy" / "values.yaml"
DEFAULT_SIZING: dict[str, Any] = yaml.safe_load(VALUES_YAML.read_text())["sizing"]


def lint_values(case: str) -> dict[str, Any]:
    """`helm lint` has no --api-versions: the ServiceMonitor case forces the template on."""
    values = CASES[case][0]
    if case == "servicemonitor":
        return {"serviceMonitor": {"enabled": True, "force": True}}
    return values


@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("kube_version", KUBE_VERSIONS)
def test_helm_lint_strict_passes(helm: Helm, kube_version: str, case: str) -> None:
    done = helm.lint(kube_version=kube_version, values=lint_values(case))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "[WARNING]" not in done.stdout and "[ERROR]" not in done.stdout


@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("kube_version", KUBE_VERSIONS)
def test_helm_template_renders_the_objects_of_each_values_case(helm: Helm, kube_version: str, case: str) -> None:
    values, api_versions, kinds = CASES[case]
    manifests = helm.template(kube_version=kube_version, values=values, api_versions=api_versions)
    assert set(by_kind(manifests)) == kinds
    for doc in manifests:
        assert doc["metadata"]["namespace"] == "proxy", doc["kind"]
        assert doc["metadata"]["labels"]["app.kubernetes.io/instance"] == "pp"


def test_chart_refuses_kubernetes_older_than_its_kube_version(helm: Helm) -> None:
    done = helm.template_text(kube_version="1.28.0", check=False)
    assert done.returncode != 0 and "kubeVersion" in done.stderr


BAD_PARTITIONS = {
    "proxy": {
        "partitions": [
            {"name": "tp1", "role": "tenant", "existingSecret": "s-tp1"},
            {"name": "rp1", "role": "bogus", "existingSecret": "s-rp1"},
        ]
    }
}


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"replicaCount": "three"}, "at '/replicaCount': got string, want integer"),
        ({"replicas": 3}, "additional properties 'replicas' not allowed"),
        ({"proxy": {"bogusKey": 1}}, "at '/proxy': additional properties 'bogusKey' not allowed"),
        (BAD_PARTITIONS, "at '/proxy/partitions/1/role': value must be one of 'tenant', 'resource'"),
        # YAML 1.1 reads an unquoted `n` as false: the schema says which field.
        ({"proxy": {"tenants": {"ranges": [{"first": False, "last": "z", "partition": "tp2"}]}}}, "at '/proxy/tenants/ranges/0/first'"),
        ({"sizing": {"expectedNodes": -1}}, "at '/sizing/expectedNodes'"),
        ({"autoscaling": {"behavior": {"scaleUp": {"periodSeconds": 0}}}}, "at '/autoscaling/behavior/scaleUp/periodSeconds'"),
    ],
    ids=["replicaCount-string", "unknown-top-level-key", "unknown-proxy-key", "partition-role", "range-bool", "negative-count", "hpa-period"],
)
def test_invalid_values_fail_lint_and_template_with_a_schema_message_naming_the_field(
    helm: Helm, values: dict[str, Any], message: str
) -> None:
    rendered = helm.template_text(values=values, check=False)
    assert rendered.returncode != 0
    assert "values don't meet the specifications of the schema" in rendered.stderr
    assert message in rendered.stderr, rendered.stderr
    linted = helm.lint(kube_version="1.36.0", values=values)
    assert linted.returncode != 0 and message in linted.stdout, linted.stdout


TWO_PARTITIONS = [
    {"name": "tp1", "role": "tenant", "existingSecret": "s-tp1"},
    {"name": "rp1", "role": "resource", "existingSecret": "s-rp1"},
]


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"proxy": {"systemPartition": "rp1"}}, 'proxy.systemPartition: "rp1" is not a tenant partition'),
        ({"proxy": {"partitions": [TWO_PARTITIONS[0], TWO_PARTITIONS[0], TWO_PARTITIONS[1]]}}, 'proxy.partitions[1].name: duplicate partition "tp1"'),
        ({"proxy": {"partitions": [TWO_PARTITIONS[0], {**TWO_PARTITIONS[0], "name": "tp2"}]}}, "at least one partition with role resource"),
        ({"terminationGracePeriodSeconds": 10}, "terminationGracePeriodSeconds: 10 must exceed"),
        ({"autoscaling": {"minReplicas": 5, "maxReplicas": 3}}, "autoscaling.minReplicas"),
    ],
    ids=["system-partition-role", "duplicate-partition", "no-resource-partition", "grace", "hpa-bounds"],
)
def test_values_the_schema_cannot_judge_fail_rendering_with_one_line(helm: Helm, values: dict[str, Any], message: str) -> None:
    done = helm.template_text(values=values, check=False)
    assert done.returncode != 0
    assert message in done.stderr, done.stderr


def test_deployment_runs_non_root_read_only_with_https_probes_and_a_long_enough_grace(helm: Helm) -> None:
    deployment = by_kind(helm.template())["Deployment"]
    pod = deployment["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert pod["securityContext"]["runAsNonRoot"] is True and pod["securityContext"]["runAsUser"] == 10001
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert container["securityContext"]["allowPrivilegeEscalation"] is False
    assert container["securityContext"]["capabilities"]["drop"] == ["ALL"]
    assert container["livenessProbe"]["httpGet"] == {"path": "/livez", "port": "https", "scheme": "HTTPS"}
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "https", "scheme": "HTTPS"}
    prestop = int(container["lifecycle"]["preStop"]["exec"]["command"][1])
    proxy_shutdown_grace = 15  # seconds: failure.shutdown_drain_seconds + shutdown_grace_seconds, the proxy's defaults
    from config.models import FailureConfig

    assert FailureConfig().shutdown_drain_seconds + FailureConfig().shutdown_grace_seconds == proxy_shutdown_grace
    assert pod["terminationGracePeriodSeconds"] > prestop + proxy_shutdown_grace
    assert container["command"] == ["partition-proxy", "serve", "--config", "/etc/partition-proxy/config/config.yaml", "--log-level", "INFO", "--workers", "1"]
    # Anti-affinity on hosts and a zone spread keep replicas apart.
    term = pod["affinity"]["podAntiAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"][0]["podAffinityTerm"]
    assert term["topologyKey"] == "kubernetes.io/hostname"
    assert pod["topologySpreadConstraints"][0]["topologyKey"] == "topology.kubernetes.io/zone"
    # /tmp is the only writable path (the kubeconfig loader writes embedded certificates there).
    mounts = {m["mountPath"]: m for m in container["volumeMounts"]}
    assert "/tmp" in mounts and all(m.get("readOnly") for path, m in mounts.items() if path != "/tmp")
    # The HPA owns the replica count.
    assert "replicas" not in deployment["spec"]
    assert deployment["spec"]["strategy"]["rollingUpdate"] == {"maxSurge": 1, "maxUnavailable": 0}


def test_ha_values_pin_three_replicas_hard_anti_affinity_and_a_pdb_of_two(helm: Helm) -> None:
    objects = by_kind(helm.template(values=CASES["ha"][0]))
    assert objects["Deployment"]["spec"]["replicas"] == 3
    pod = objects["Deployment"]["spec"]["template"]["spec"]
    assert pod["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][0]["topologyKey"] == "kubernetes.io/hostname"
    assert objects["PodDisruptionBudget"]["spec"]["minAvailable"] == 2
    assert "maxUnavailable" not in objects["PodDisruptionBudget"]["spec"]
    policy = objects["NetworkPolicy"]["spec"]
    assert policy["policyTypes"] == ["Ingress", "Egress"]
    assert {"port": 53, "protocol": "UDP"} in policy["egress"][0]["ports"]


def volumes_by_mount_path(manifests: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """The proxy container's mounts: mount path -> the pod volume mounted there."""
    pod = by_kind(manifests)["Deployment"]["spec"]["template"]["spec"]
    volumes = {v["name"]: v for v in pod["volumes"]}
    return {m["mountPath"]: volumes[m["name"]] for m in pod["containers"][0]["volumeMounts"]}


def test_config_map_maps_values_onto_the_proxy_config_and_points_into_the_mounted_secrets(helm: Helm) -> None:
    values: dict[str, Any] = {
        "proxy": {
            "tenants": {"namespaces": {"team-x": "acme"}, "partitions": {"acme": "tp2"}, "defaultPartition": ""},
            "nodes": {"placement": "regex", "prefixes": [], "regex": [{"pattern": "^rack1-", "partition": "rp1"}, {"pattern": ".*", "partition": "rp2"}]},
            "caches": [
                {"name": "critical-pods", "resource": "pods", "role": "tenant", "labelSelector": "tier=critical", "history": 1000000, "stripManagedFields": False}
            ],
            "resourceVersions": {"tableNamespace": "proxy-system", "tableName": "rv-table", "refreshSeconds": 7, "retainEpochs": 64},
        }
    }
    manifests = helm.template(values=values)
    config = rendered_config(manifests)
    assert config["system_partition"] == "tp1"
    assert config["resource_versions"] == {"table_namespace": "proxy-system", "table_name": "rv-table", "refresh_seconds": 7, "retain_epochs": 64}
    assert config["tenants"]["namespace_to_tenant"] == "prefix"
    assert config["tenants"]["namespaces"] == {"team-x": "acme"} and config["tenants"]["partitions"] == {"acme": "tp2"}
    assert "default_partition" not in config["tenants"]
    assert config["tenants"]["ranges"][1] == {"first": "n", "last": "z", "partition": "tp2"}
    assert config["nodes"] == {"placement": "regex", "prefixes": {}, "regex": values["proxy"]["nodes"]["regex"]}
    assert config["caches"] == [
        {"name": "critical-pods", "resource": "pods", "role": "tenant", "label_selector": "tier=critical", "history": 1000000, "strip_managed_fields": False}
    ]
    assert config["listen"] == {
        "address": "0.0.0.0",
        "port": 6443,
        "tls": {
            "cert_file": "/etc/partition-proxy/tls/tls.crt",
            "key_file": "/etc/partition-proxy/tls/tls.key",
            "client_ca_file": "/etc/partition-proxy/tls/ca.crt",
        },
    }
    # Every kubeconfig path lies in the mount of its partition's Secret, every TLS file in the
    # TLS Secret's mount.
    pod = by_kind(manifests)["Deployment"]["spec"]["template"]["spec"]
    mounts = volumes_by_mount_path(manifests)
    for partition in config["partitions"]:
        directory, key = partition["kubeconfig"].rsplit("/", 1)
        assert key == "kubeconfig"
        assert mounts[directory]["secret"]["secretName"] == f"partition-proxy-{partition['name']}"
    for path in config["listen"]["tls"].values():
        assert mounts[path.rsplit("/", 1)[0]]["secret"]["secretName"] == "partition-proxy-tls"
    assert mounts["/etc/partition-proxy/config"]["configMap"]["name"] == "pp-partition-proxy"  # a directory: updated in place
    assert all("subPath" not in m for m in pod["containers"][0]["volumeMounts"])


def test_the_charts_default_caches_are_the_proxys_own(helm: Helm) -> None:
    """values.yaml's `caches` render to config.models.default_caches (no node-leases: docs/sizing.md)."""
    rendered = parse_config({**_valid(), "caches": rendered_config(helm.template())["caches"]}).caches
    assert rendered == default_caches()


def test_a_changed_config_changes_the_pod_template_so_replicas_roll(helm: Helm) -> None:
    def checksum(values: dict[str, Any]) -> str:
        deployment = by_kind(helm.template(values=values))["Deployment"]
        return str(deployment["spec"]["template"]["metadata"]["annotations"]["checksum/config"])

    assert checksum({}) != checksum({"proxy": {"systemPartition": "tp2"}})


SHARED = [{"name": n, "role": r} for n, r in (("tp1", "tenant"), ("tp2", "tenant"), ("rp1", "resource"), ("rp2", "resource"))]


def test_the_partition_set_changes_in_place_with_one_secret_for_every_partition(helm: Helm) -> None:
    """With `partitionsSecret`, a partition that joins (and a tenant fenced, a partition
    retired) changes the ConfigMap and nothing of the pod template: no replica restarts, the
    running proxies re-read the mounted file (docs/partition-set.md)."""
    base = {"proxy": {"partitionsSecret": "proxy-partitions", "partitions": SHARED}}
    grown = {"proxy": {
        "partitionsSecret": "proxy-partitions",
        "partitions": [*SHARED[:3], {**SHARED[3], "state": "retired"}, {"name": "rp3", "role": "resource"}],
        "tenants": {"fenced": ["acme"], "partitions": {"zeta": "tp2"}},
        "nodes": {"prefixes": [{"prefix": "rp1-", "partition": "rp1"}, {"prefix": "rp3-", "partition": "rp3"}]},
    }}
    before, after = by_kind(helm.template(values=base)), by_kind(helm.template(values=grown))
    assert before["Deployment"]["spec"]["template"] == after["Deployment"]["spec"]["template"]
    config = rendered_config(helm.template(values=grown))
    assert [(p["name"], p.get("state", "active"), p["kubeconfig"]) for p in config["partitions"]][-2:] == [
        ("rp2", "retired", "/etc/partition-proxy/partitions/rp2.kubeconfig"),
        ("rp3", "active", "/etc/partition-proxy/partitions/rp3.kubeconfig"),
    ]
    assert config["tenants"]["fenced"] == ["acme"]
    pod = after["Deployment"]["spec"]["template"]["spec"]
    assert [v["secret"]["secretName"] for v in pod["volumes"] if v["name"] == "partitions"] == ["proxy-partitions"]
    assert not [v for v in pod["volumes"] if v["name"].startswith("partition-")]


def test_a_retired_partitions_own_secret_is_no_longer_mounted_and_others_need_theirs(helm: Helm) -> None:
    retired = [*TWO_PARTITIONS, {"name": "rp9", "role": "resource", "state": "retired"}]
    pod = by_kind(helm.template(values={"proxy": {"partitions": retired, "tenants": {"ranges": [], "defaultPartition": "tp1"},
                                                  "nodes": {"prefixes": []}}}))["Deployment"]["spec"]["template"]["spec"]
    assert sorted(v["secret"]["secretName"] for v in pod["volumes"] if v["name"].startswith("partition-")) == ["s-rp1", "s-tp1"]
    done = helm.template_text(values={"proxy": {"partitions": [TWO_PARTITIONS[0], {"name": "rp1", "role": "resource"}]}}, check=False)
    assert done.returncode != 0 and "proxy.partitions[1].existingSecret: required unless proxy.partitionsSecret" in done.stderr


def test_hpa_scales_up_at_once_and_down_over_the_stable_window_on_cpu_and_inflight_requests(helm: Helm) -> None:
    hpa = by_kind(helm.template())["HorizontalPodAutoscaler"]
    assert hpa["apiVersion"] == "autoscaling/v2"
    spec = hpa["spec"]
    assert spec["scaleTargetRef"] == {"apiVersion": "apps/v1", "kind": "Deployment", "name": "pp-partition-proxy"}
    assert (spec["minReplicas"], spec["maxReplicas"]) == (2, 10)
    metrics = {m["type"]: m for m in spec["metrics"]}
    assert metrics["Resource"]["resource"] == {"name": "cpu", "target": {"type": "Utilization", "averageUtilization": 70}}
    pods = metrics["Pods"]["pods"]
    assert pods["metric"] == {"name": "partition_proxy_inflight_requests", "selector": {"matchLabels": {"kind": "other"}}}
    assert pods["target"] == {"type": "AverageValue", "averageValue": "20"}
    # The metric is the one the proxy exports.
    assert '"partition_proxy_inflight_requests"' in (REPO / "proxy" / "metrics.py").read_text()
    # Seed 001: a 6 s panic window scales up at once, a 60 s stable window scales down.
    up, down = spec["behavior"]["scaleUp"], spec["behavior"]["scaleDown"]
    assert 0 <= up["stabilizationWindowSeconds"] <= 6
    assert all(p["periodSeconds"] <= 6 for p in up["policies"]) and up["selectPolicy"] == "Max"
    assert {"type": "Percent", "value": 100, "periodSeconds": 6} in up["policies"]
    assert down["stabilizationWindowSeconds"] >= 60
    assert down["policies"] == [{"type": "Percent", "value": 50, "periodSeconds": 60}]


def test_hpa_without_a_metrics_adapter_keeps_only_the_cpu_metric(helm: Helm) -> None:
    hpa = by_kind(helm.template(values={"autoscaling": {"inflightRequests": {"enabled": False}}}))["HorizontalPodAutoscaler"]
    assert [m["type"] for m in hpa["spec"]["metrics"]] == ["Resource"]


@pytest.mark.parametrize(
    ("service_monitor", "api_versions", "rendered"),
    [
        ({"enabled": True}, (), False),
        ({"enabled": True}, (SERVICE_MONITOR_API,), True),
        ({"enabled": True}, (f"{SERVICE_MONITOR_API}/ServiceMonitor",), True),
        ({"enabled": True, "force": True}, (), True),
        ({"enabled": False, "force": True}, (SERVICE_MONITOR_API,), False),
    ],
    ids=["no-api", "api", "api-kind", "forced", "disabled"],
)
def test_service_monitor_renders_only_when_enabled_and_the_api_is_served_or_forced(
    helm: Helm, service_monitor: dict[str, Any], api_versions: tuple[str, ...], rendered: bool
) -> None:
    objects = by_kind(helm.template(values={"serviceMonitor": service_monitor}, api_versions=api_versions))
    assert ("ServiceMonitor" in objects) is rendered
    if rendered:
        endpoint = objects["ServiceMonitor"]["spec"]["endpoints"][0]
        assert (endpoint["port"], endpoint["scheme"], endpoint["path"]) == ("https", "https", "/metrics")


# -- sizing -------------------------------------------------------------------------------------


def expected_memory_mib(nodes: int, pods: int, values: dict[str, Any] | None = None, *, workers: int = 1,
                        fewest_replicas: int = 2) -> int:
    """The sizing rule of values.yaml, independently: max(floor, roundUp(workers x (base + objects)
    + kubelets + the supervisor with more than one worker, step)); kubelets by default every
    node's spread over the fewest replicas but one."""
    s = {**DEFAULT_SIZING, **(values or {})}
    kubelets = s["expectedKubeletsPerReplica"]
    if kubelets is None:
        kubelets = math.ceil(nodes / max(1, fewest_replicas - 1))
    total = (workers * (s["baseMiB"] * MIB + nodes * s["bytesPerNode"] + pods * s["bytesPerPod"])
             + kubelets * s["bytesPerKubelet"] + (s["supervisorMiB"] * MIB if workers > 1 else 0))
    step = s["stepMiB"] * MIB
    return int(max(s["floorMiB"], math.ceil(total / step) * s["stepMiB"]))


def memory_of(helm: Helm, sizing: dict[str, Any], resources: dict[str, Any] | None = None) -> tuple[str, str]:
    values: dict[str, Any] = {"sizing": sizing}
    if resources is not None:
        values["resources"] = resources
    deployment = helm.template(values=values, show_only="templates/deployment.yaml")[0]
    res = deployment["spec"]["template"]["spec"]["containers"][0]["resources"]
    return res["requests"]["memory"], res["limits"]["memory"]


@pytest.mark.parametrize(
    ("nodes", "pods", "sizing"),
    [
        (0, 0, {}),
        (1000, 0, {}),
        (4700, 0, {}),  # just past a step boundary
        (50000, 0, {}),
        (10000, 100000, {}),
        (250000, 2000000, {}),  # 5 x 50k-node federation with every pod cached: no overflow
        (10, 0, {"floorMiB": 64, "baseMiB": 0, "stepMiB": 32}),
    ],
)
def test_memory_follows_object_counts_rounded_up_to_a_step_never_below_the_floor(
    helm: Helm, nodes: int, pods: int, sizing: dict[str, Any]
) -> None:
    want = expected_memory_mib(nodes, pods, sizing)
    request, limit = memory_of(helm, {"expectedNodes": nodes, "expectedPods": pods, **sizing})
    assert request == limit == f"{want}Mi"
    s = {**DEFAULT_SIZING, **sizing}
    assert want >= s["floorMiB"]
    # Enough for the objects and every node's kubelet (2 replicas at the fewest): never rounded down.
    assert want * MIB >= s["baseMiB"] * MIB + nodes * s["bytesPerNode"] + pods * s["bytesPerPod"] + nodes * s["bytesPerKubelet"]


@pytest.mark.parametrize(
    ("values", "kubelets"),
    [
        ({}, 10000),  # the HPA's 2 replicas at the fewest: one serves them all while the other restarts
        ({"autoscaling": {"minReplicas": 5}}, 2500),
        ({"autoscaling": {"enabled": False}, "replicaCount": 4}, 3334),
        ({"autoscaling": {"enabled": False}, "replicaCount": 1}, 10000),
        ({"sizing": {"expectedKubeletsPerReplica": 700}}, 700),
        ({"sizing": {"expectedKubeletsPerReplica": 0}}, 0),
    ],
)
def test_memory_holds_the_kubelets_a_replica_serves_when_one_other_is_down(
    helm: Helm, values: dict[str, Any], kubelets: int
) -> None:
    sizing = {"expectedNodes": 10000, "expectedPods": 0, **values.get("sizing", {})}
    deployment = helm.template(values={**values, "sizing": sizing}, show_only="templates/deployment.yaml")[0]
    memory = deployment["spec"]["template"]["spec"]["containers"][0]["resources"]["requests"]["memory"]
    without = expected_memory_mib(10000, 0, {**sizing, "expectedKubeletsPerReplica": 0})
    want = expected_memory_mib(10000, 0, {**sizing, "expectedKubeletsPerReplica": kubelets})
    assert memory == f"{want}Mi"
    assert (want > without) is (kubelets > 0)


def test_bytes_per_kubelet_and_the_supervisor_are_not_below_the_fleets_measured() -> None:
    """sizing.bytesPerKubelet covers the worst step of the fleet ladders `partition-proxy size`
    reads (bench/results, proxy/sizing.py), and supervisorMiB the supervisor they measured."""
    worst = 0.0
    for name in ("fleet-ladder-8aa2ea9.json", "fleet-ladder-8aa2ea9-b.json", "fleet-ladder-2workers-0eaeb08.json",
                 "fleet-ladder-2workers-db274ce.json"):
        steps = json.loads((REPO / "bench" / "results" / name).read_text())["steps"]
        worst = max([worst] + [s["proxy"]["server_figures"]["rss_per_kubelet_bytes"] for s in steps])
    assert worst > 100_000  # the files were read
    assert DEFAULT_SIZING["bytesPerKubelet"] >= worst, f"sizing.bytesPerKubelet: update to the fleets' {worst:.0f} B"
    steps = json.loads((REPO / "bench" / "results" / "fleet-ladder-2workers-0eaeb08.json").read_text())["steps"]
    supervisor = max(s["proxy"]["server_figures"]["rss_by_process_mib"][0] for s in steps)
    assert DEFAULT_SIZING["supervisorMiB"] >= supervisor


def test_explicit_memory_resources_win_over_the_computed_figure(helm: Helm) -> None:
    resources = {"requests": {"cpu": "1", "memory": "3Gi"}, "limits": {"memory": "4Gi"}}
    assert memory_of(helm, {"expectedNodes": 50000}, resources) == ("3Gi", "4Gi")


def test_readme_sizing_table_is_what_the_chart_renders(helm: Helm) -> None:
    readme = (REPO / "README.md").read_text()
    rows = re.findall(r"^\| (\d+) \| (\d+) \| (\d+Mi) \|$", readme, flags=re.MULTILINE)
    assert len(rows) >= 5, "README sizing table not found"
    for nodes, pods, memory in rows:
        assert memory_of(helm, {"expectedNodes": int(nodes), "expectedPods": int(pods)}) == (memory, memory), (nodes, pods)


def test_bytes_per_node_is_not_below_the_benchmarked_memory_per_cached_node() -> None:
    """sizing.bytesPerNode covers what bench/cache_memory.py measured per node (its figures
    committed with the README's tables, bench/results), each at its worst: the Node in the JSON
    cache, its protobuf twin, the node's Lease and the Lease's twin."""
    path = REPO / "bench" / "results" / "cache_memory.json"
    result = json.loads(path.read_text())["result"]
    nodes = result["nodes"]
    node = max(result["proxy_all"]["rss_growth_per_object_bytes"], result["proxy_all_started_after"]["rss_growth_per_object_bytes"],
               (result["proxy_all_started_after"]["rss_peak_hwm_mib"] - result["proxy_all"]["rss_before_mib"]) * MIB / nodes)
    twin = result["proxy_all_protobuf_twin"]
    node_twin = max(twin["rss_growth_per_object_bytes"], (twin["rss_peak_hwm_mib"] - result["proxy_all"]["rss_peak_hwm_mib"]) * MIB / nodes)
    leases = result["proxy_leases"]
    lease_and_twin = max(leases["rss_growth_per_object_bytes"] + leases["protobuf_twin"]["rss_growth_per_object_bytes"],
                         (leases["protobuf_twin"]["rss_peak_hwm_mib"] - leases["rss_before_mib"]) * MIB / nodes)
    need = node + node_twin + lease_and_twin
    assert DEFAULT_SIZING["bytesPerNode"] >= need, f"sizing.bytesPerNode: update to the benchmark's {need:.0f} B per node"


def test_bytes_per_pod_is_not_below_the_benchmarked_memory_per_cached_pod() -> None:
    """sizing.bytesPerPod covers what `bench/cache_memory.py --pods` measured per pod, each part
    at its worst: the pod in the JSON cache (filled by events, or by one LIST at start-up, at
    its peak) and its protobuf twin (at its peak)."""
    pods = json.loads((REPO / "bench" / "results" / "cache_memory-pods.json").read_text())["result"]["pods"]
    n = pods["pods"]
    after = pods["proxy_started_after"]
    json_cache = max(pods["proxy"]["rss_growth_per_object_bytes"], after["rss_growth_per_object_bytes"],
                     after["rss_peak_growth_per_object_bytes"])
    twin = pods["protobuf_twin"]
    twin_bytes = max(twin["rss_growth_per_object_bytes"], (twin["rss_peak_hwm_mib"] - pods["proxy"]["rss_peak_hwm_mib"]) * MIB / n)
    need = json_cache + twin_bytes
    assert DEFAULT_SIZING["bytesPerPod"] >= need, f"sizing.bytesPerPod: update to the benchmark's {need:.0f} B per pod"


def test_values_yaml_documents_every_value() -> None:
    """Every value has a comment right above it, or belongs to an object value documented as a
    whole (resources, securityContext, ...)."""
    undocumented = []
    stack: list[tuple[int, bool]] = []  # (indent, documented) of the enclosing keys
    previous = ""
    for number, line in enumerate(VALUES_YAML.read_text().splitlines(), 1):
        match = re.match(r"^( *)([A-Za-z][A-Za-z0-9]*):(.*)$", line)
        if match:
            indent, key, rest = len(match.group(1)), match.group(2), match.group(3).strip()
            while stack and stack[-1][0] >= indent:
                stack.pop()
            documented = previous.lstrip().startswith("#")
            is_leaf = rest != "" and not rest.startswith("#")
            if is_leaf and not documented and not any(d for _, d in stack):
                undocumented.append(f"{number}: {key}")
            if not is_leaf:
                stack.append((indent, documented))
        previous = line
    assert undocumented == []


@pytest.mark.parametrize("workers", [1, 3])
def test_workers_are_passed_and_multiply_the_memory(helm: Helm, workers: int) -> None:
    """Each worker holds its own caches: memory = roundUp(workers x (base + objects) + kubelets
    + the supervisor beside more than one worker)."""
    deployment = helm.template(values={"proxy": {"workers": workers}, "sizing": {"expectedNodes": 10000, "expectedPods": 50000}},
                               show_only="templates/deployment.yaml")[0]
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    command = container["command"]
    assert command[command.index("--workers") + 1] == str(workers)
    want = expected_memory_mib(10000, 50000, workers=workers)
    assert container["resources"]["requests"]["memory"] == container["resources"]["limits"]["memory"] == f"{want}Mi"


def test_workers_below_one_fail_the_schema(helm: Helm) -> None:
    result = helm.template_text(values={"proxy": {"workers": 0}}, check=False)
    assert result.returncode != 0 and "workers" in result.stderr


def test_a_kubelet_client_secret_is_mounted_and_named_in_the_config(helm: Helm) -> None:
    assert "kubelet" not in rendered_config(helm.template())  # off by default: the TPs answer
    values = {"proxy": {"kubelet": {"existingSecret": "proxy-kubelet-client"}}}
    manifests = helm.template(values=values)
    assert rendered_config(manifests)["kubelet"] == {
        "client_cert_file": "/etc/partition-proxy/kubelet/tls.crt",
        "client_key_file": "/etc/partition-proxy/kubelet/tls.key",
        "ca_file": "/etc/partition-proxy/kubelet/ca.crt",
    }
    mounts = volumes_by_mount_path(manifests)
    assert mounts["/etc/partition-proxy/kubelet"]["secret"]["secretName"] == "proxy-kubelet-client"
    no_ca = rendered_config(helm.template(values={"proxy": {"kubelet": {"existingSecret": "s", "caKey": ""}}}))
    assert "ca_file" not in no_ca["kubelet"]
