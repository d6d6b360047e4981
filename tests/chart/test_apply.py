"""The rendered manifests on a real kube-apiserver of the test federation: server-side dry-run,
then created for real. Applied straight to tp1 (the system partition, where the proxy routes
cluster-scoped objects) into a namespace of a tenant tp1 owns. The objects are created and
valid; no pod runs, since the federation has no controller-manager and no kubelet."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.chart.conftest import CHART, Helm, by_kind
from tests.chart.test_helm import CASES
from tests.federation import Kube

pytestmark = pytest.mark.integration

# Every case but the ServiceMonitor one: the test partitions serve no monitoring.coreos.com CRD.
APPLIED_CASES = ["defaults", "ha", "hpa-off"]


def kubectl_apply(kube: Kube, manifest: Path, namespace: str, *extra: str) -> str:
    return kube.kubectl("apply", "-n", namespace, "-f", str(manifest), *extra, kubeconfig=kube.direct("tp1"))


def render_to(helm: Helm, path: Path, *, namespace: str, values: dict[str, Any]) -> list[dict[str, Any]]:
    done = helm.template_text(values=values, namespace=namespace)
    path.write_text(done.stdout)
    return [doc for doc in yaml.safe_load_all(done.stdout) if doc]


def test_rendered_manifests_pass_server_side_dry_run_then_are_created(helm: Helm, kube: Kube, unique: str, tmp_path: Path) -> None:
    namespace = f"acme{unique}-chart"  # tenant acme<unique>: tp1 by the a-m range
    kube.kubectl("create", "namespace", namespace, kubeconfig=kube.direct("tp1"))

    for case in APPLIED_CASES:
        manifest = tmp_path / f"{case}.yaml"
        manifests = render_to(helm, manifest, namespace=namespace, values=CASES[case][0])
        out = kubectl_apply(kube, manifest, namespace, "--dry-run=server")
        for doc in manifests:
            assert f"{doc['kind'].lower()}" in out.lower() and "(server dry run)" in out, out

    manifest = tmp_path / "applied.yaml"
    values = {**CASES["defaults"][0], "networkPolicy": CASES["ha"][0]["networkPolicy"]}
    manifests = render_to(helm, manifest, namespace=namespace, values=values)
    kubectl_apply(kube, manifest, namespace)

    kinds = by_kind(manifests)
    assert set(kinds) == {"ConfigMap", "Deployment", "Service", "ServiceAccount", "PodDisruptionBudget", "HorizontalPodAutoscaler", "NetworkPolicy"}
    resources = "configmap,deployment,service,serviceaccount,poddisruptionbudget,horizontalpodautoscaler.v2.autoscaling,networkpolicy"
    listed = json.loads(kube.kubectl("get", resources, "-n", namespace, "-o", "json", kubeconfig=kube.direct("tp1")))
    stored = {(o["kind"], o["metadata"]["name"]) for o in listed["items"]}
    for kind, doc in kinds.items():
        assert (kind, doc["metadata"]["name"]) in stored

    # What the server stored is what the chart meant (defaulting added fields, dropped none).
    got = {o["kind"]: o for o in listed["items"] if o["metadata"]["name"] == "pp-partition-proxy"}
    pod = got["Deployment"]["spec"]["template"]["spec"]
    container = pod["containers"][0]
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert container["readinessProbe"]["httpGet"]["scheme"] == "HTTPS"
    assert pod["terminationGracePeriodSeconds"] == 30
    assert pod["topologySpreadConstraints"][0]["matchLabelKeys"] == ["pod-template-hash"]
    hpa = got["HorizontalPodAutoscaler"]["spec"]
    assert hpa["behavior"]["scaleUp"]["stabilizationWindowSeconds"] == 0
    assert hpa["behavior"]["scaleDown"]["stabilizationWindowSeconds"] == 60
    assert any(m["type"] == "Pods" for m in hpa["metrics"])
    assert yaml.safe_load(got["ConfigMap"]["data"]["config.yaml"])["system_partition"] == "tp1"
    # No controller-manager runs: nothing turns the Deployment into pods.
    assert kube.kubectl("get", "pods", "-n", namespace, "-o", "name", kubeconfig=kube.direct("tp1")).strip() == ""

    # The same objects through the proxy: it routes the tenant's namespace to tp1.
    through_proxy = kube.kubectl("get", "deployment,hpa,configmap", "-n", namespace, "-o", "name")
    assert "deployment.apps/pp-partition-proxy" in through_proxy

    # Invalid objects are refused by the real server too (the dry-run above is not vacuous).
    broken = tmp_path / "broken.yaml"
    broken.write_text(manifest.read_text().replace("averageUtilization: 70", "averageUtilization: -70"))
    with pytest.raises(subprocess.CalledProcessError) as refused:
        kubectl_apply(kube, broken, namespace, "--dry-run=server")
    assert "averageUtilization" in refused.value.stderr

    kube.kubectl("delete", "-n", namespace, "-f", str(manifest), "--wait=false", kubeconfig=kube.direct("tp1"))


def test_helm_install_dry_run_against_the_real_server_discovers_no_service_monitor_api_and_says_so(
    helm: Helm, kube: Kube, unique: str
) -> None:
    """`helm install --dry-run=server`: capabilities from the real server's discovery (no
    monitoring.coreos.com there), NOTES rendered, nothing stored."""
    namespace = f"bee{unique}-chart"
    kube.kubectl("create", "namespace", namespace, kubeconfig=kube.direct("tp1"))
    done = helm.run(
        "install", "pp", str(CHART), "--namespace", namespace, "--dry-run=server", "--kubeconfig", str(kube.direct("tp1")),
        values={"serviceMonitor": {"enabled": True}, "sizing": {"expectedNodes": 50000, "expectedPods": 0}},
    )
    assert done.returncode == 0, done.stderr
    manifests = [doc for doc in yaml.safe_load_all(done.stdout.split("MANIFEST:", 1)[1].split("NOTES:", 1)[0]) if doc]
    assert "ServiceMonitor" not in {doc["kind"] for doc in manifests}
    notes = done.stdout.split("NOTES:", 1)[1]
    assert "no ServiceMonitor was created" in " ".join(notes.split())
    assert "Memory per replica: 6592Mi" in notes
    assert "and 50000 kubelets per replica" in " ".join(notes.split())
    assert f"https://pp-partition-proxy.{namespace}.svc:443" in notes
    assert kube.kubectl("get", "secrets", "-n", namespace, "-o", "name", kubeconfig=kube.direct("tp1")).strip() == ""
