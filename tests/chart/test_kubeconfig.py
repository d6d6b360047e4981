"""`partition-proxy kubeconfig`: the document it builds, its one-line errors, and kubeconfigs
that work with the real kubectl through the proxy for a kubelet of an RP (its node, its lease,
its pods across TPs) and a scheduler of a TP (its TP's pods, all RPs' nodes, bindings)."""

from __future__ import annotations

import base64
import datetime as dt
import http.client
import json
import ssl
from pathlib import Path
from urllib.parse import urlsplit

import pytest
import yaml

from config import load_config
from proxy.cli import main
from proxy.kubeconfig_cmd import Credentials, KubeconfigError, build_kubeconfig, check_partition, partition_server
from tests.federation import Kube, node, pod

CREDS = Credentials(ca_pem=b"CA", cert_pem=b"CERT", key_pem=b"KEY")


@pytest.mark.parametrize(
    ("server", "partition", "url"),
    [
        ("https://proxy:6443", "rp1", "https://proxy:6443/partitions/rp1"),
        ("https://proxy:6443/", "tp2", "https://proxy:6443/partitions/tp2"),
        ("https://10.0.0.1", "rp-east-1", "https://10.0.0.1/partitions/rp-east-1"),
        ("https://lb.example/kube", "rp1", "https://lb.example/kube/partitions/rp1"),  # behind a path-routing LB
    ],
)
def test_server_url_carries_the_partition_path_prefix(server: str, partition: str, url: str) -> None:
    assert partition_server(server, partition) == url


@pytest.mark.parametrize(
    ("server", "partition", "flag"),
    [
        ("http://proxy:6443", "rp1", "--server"),
        ("proxy:6443", "rp1", "--server"),
        ("https://", "rp1", "--server"),
        ("https://proxy:6443?x=1", "rp1", "--server"),
        ("https://user:pw@proxy", "rp1", "--server"),
        ("https://proxy/partitions/rp1", "rp1", "--server"),
        ("https://proxy:70000", "rp1", "--server"),
        ("https://proxy", "RP1", "--partition"),
        ("https://proxy", "rp1/../tp1", "--partition"),
    ],
)
def test_bad_server_or_partition_is_refused_naming_the_flag(server: str, partition: str, flag: str) -> None:
    with pytest.raises(KubeconfigError, match=f"^{flag}: "):
        partition_server(server, partition)


def test_kubelet_kubeconfig_embeds_ca_and_client_credentials() -> None:
    doc = build_kubeconfig(server="https://proxy:6443", partition="rp1", role="kubelet", name="rp1-n7", credentials=CREDS)
    (cluster,) = doc["clusters"]
    (user,) = doc["users"]
    (context,) = doc["contexts"]
    assert cluster["cluster"] == {"server": "https://proxy:6443/partitions/rp1", "certificate-authority-data": base64.b64encode(b"CA").decode()}
    assert user["user"] == {"client-certificate-data": base64.b64encode(b"CERT").decode(), "client-key-data": base64.b64encode(b"KEY").decode()}
    assert context["context"] == {"cluster": cluster["name"], "user": user["name"]}
    assert doc["current-context"] == context["name"] == "kubelet-rp1-n7@rp1"


@pytest.mark.parametrize(("role", "name"), [("kubelet", "Node_1"), ("kubelet", ""), ("scheduler", "a" * 254), ("controller", "x")])
def test_bad_role_or_name_is_refused(role: str, name: str) -> None:
    with pytest.raises(KubeconfigError, match="^--(role|name): "):
        build_kubeconfig(server="https://p", partition="rp1", role=role, name=name, credentials=CREDS)  # type: ignore[arg-type]


def test_partition_must_exist_and_suit_the_role(kube_config_file: Path) -> None:
    config = load_config(kube_config_file)
    check_partition(config, partition="rp1", role="kubelet")
    check_partition(config, partition="tp2", role="scheduler")
    with pytest.raises(KubeconfigError, match="^--partition: a kubelet belongs to a resource partition; 'tp1' is a tenant"):
        check_partition(config, partition="tp1", role="kubelet")
    with pytest.raises(KubeconfigError, match="^--partition: 'rp9' is not a partition of the config"):
        check_partition(config, partition="rp9", role="kubelet")


@pytest.fixture
def kube_config_file(tmp_path: Path) -> Path:
    path = tmp_path / "config.yaml"
    parts = [("tp1", "tenant"), ("tp2", "tenant"), ("rp1", "resource"), ("rp2", "resource")]
    path.write_text(yaml.safe_dump({"partitions": [{"name": n, "role": r, "kubeconfig": f"{n}.yaml"} for n, r in parts], "system_partition": "tp1"}))
    return path


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    from hack.pki import CertificateAuthority

    directory = tmp_path_factory.mktemp("pki")
    ca = CertificateAuthority.create(directory / "ca", "test-ca")
    crt, key = ca.issue_client(directory, "node", "system:node:rp1-a", ["system:nodes"])
    _, other_key = ca.issue_client(directory, "other", "someone")
    return {"ca": ca.cert_file, "crt": crt, "key": key, "other_key": other_key}


def run_cli(*args: str) -> int:
    return main(["kubeconfig", *[str(a) for a in args]])


@pytest.mark.parametrize(
    ("change", "flag"),
    [
        ({"--server": None}, "--server: required"),
        ({"--role": "bogus"}, "--role: 'bogus' is not one of kubelet, scheduler"),
        ({"--name": None}, "--name: a kubelet's kubeconfig needs its node name"),
        ({"--ca-file": "missing.crt"}, "--ca-file: cannot read missing.crt"),
        ({"--ca-file": "KEY"}, "--ca-file: "),
        ({"--client-key": "OTHER_KEY"}, "--client-key: "),
        ({"--partition": "tp1", "--config": "CONFIG"}, "--partition: a kubelet belongs to a resource partition"),
        ({"-o": "/nonexistent/dir/out.yaml"}, "-o: cannot write into /nonexistent/dir"),
    ],
)
def test_cli_errors_are_one_line_naming_the_flag_and_exit_2(
    pki: dict[str, Path], kube_config_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], change: dict[str, str | None], flag: str
) -> None:
    subst = {"KEY": str(pki["key"]), "OTHER_KEY": str(pki["other_key"]), "CONFIG": str(kube_config_file)}
    flags: dict[str, str | None] = {
        "--server": "https://proxy:6443",
        "--ca-file": str(pki["ca"]),
        "--client-cert": str(pki["crt"]),
        "--client-key": str(pki["key"]),
        "--partition": "rp1",
        "--role": "kubelet",
        "--name": "rp1-a",
        "-o": str(tmp_path / "out.yaml"),
    }
    flags.update({k: subst.get(v, v) if v else v for k, v in change.items()})
    argv = [x for k, v in flags.items() if v is not None for x in (k, v)]
    assert run_cli(*argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"partition-proxy: kubeconfig: {flag}"), err
    assert not (tmp_path / "out.yaml").exists()


def test_cli_writes_a_private_file(pki: dict[str, Path], tmp_path: Path) -> None:
    out = tmp_path / "kubelet.yaml"
    argv = ["--server", "https://proxy:6443", "--ca-file", pki["ca"], "--client-cert", pki["crt"], "--client-key", pki["key"]]
    assert run_cli(*map(str, argv), "--partition", "rp1", "--role", "kubelet", "--name", "rp1-a", "-o", str(out)) == 0
    assert out.stat().st_mode & 0o777 == 0o600
    doc = yaml.safe_load(out.read_text())
    assert doc["clusters"][0]["cluster"]["server"] == "https://proxy:6443/partitions/rp1"
    assert base64.b64decode(doc["users"][0]["user"]["client-key-data"]) == pki["key"].read_bytes()


# -- through the proxy, with the real kubectl -----------------------------------------------------


def client_kubeconfig(kube: Kube, tmp_path: Path, *, user: str, groups: list[str], partition: str, role: str, name: str | None = None) -> Path:
    crt, key = kube.fed.ca.issue_client(tmp_path, user.replace(":", "_"), user, groups)
    out = tmp_path / f"{role}-{partition}.yaml"
    argv = ["--server", kube.proxy.server, "--ca-file", str(kube.fed.ca_file), "--client-cert", str(crt), "--client-key", str(key)]
    argv += ["--partition", partition, "--role", role, "--config", str(kube.proxy.config_path), "-o", str(out)]
    if name:
        argv += ["--name", name]
    assert run_cli(*argv) == 0
    return out


def unbound_pod(namespace: str, name: str) -> dict[str, object]:
    """A pod no scheduler has placed yet (no spec.nodeName)."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"containers": [{"name": "app", "image": "registry.k8s.io/pause:3.10"}]},
    }


def post_json(kubeconfig: Path, path: str, body: dict[str, object], scratch: Path) -> tuple[int, str]:
    """POST `body` as JSON to `path` under the kubeconfig's server (its partition path prefix),
    authenticating with its embedded client certificate and trusting its embedded CA."""
    doc = yaml.safe_load(kubeconfig.read_text())
    cluster, user = doc["clusters"][0]["cluster"], doc["users"][0]["user"]
    files = {}
    for field in ("client-certificate-data", "client-key-data"):
        files[field] = scratch / field
        files[field].write_bytes(base64.b64decode(user[field]))
    ctx = ssl.create_default_context(cadata=base64.b64decode(cluster["certificate-authority-data"]).decode())
    ctx.load_cert_chain(files["client-certificate-data"], files["client-key-data"])
    url = urlsplit(cluster["server"])
    conn = http.client.HTTPSConnection(url.hostname or "", url.port, context=ctx, timeout=30)
    try:
        conn.request("POST", url.path + path, body=json.dumps(body), headers={"Content-Type": "application/json"})
        response = conn.getresponse()
        return response.status, response.read().decode()
    finally:
        conn.close()


def names(kube: Kube, *args: str, kubeconfig: Path) -> set[str]:
    listed = json.loads(kube.kubectl(*args, "-o", "json", kubeconfig=kubeconfig))
    return {f"{o['metadata'].get('namespace', '')}/{o['metadata']['name']}".lstrip("/") for o in listed["items"]}


@pytest.mark.integration
def test_kubelet_kubeconfig_reaches_its_node_its_lease_and_its_pods_in_every_tenant_partition(kube: Kube, unique: str, tmp_path: Path) -> None:
    me = f"rp1-kl{unique}"
    kube.create(node(me))  # through the admin: the rp1- prefix places it on rp1
    kubeconfig = client_kubeconfig(kube, tmp_path, user=f"system:node:{me}", groups=["system:nodes"], partition="rp1", role="kubelet", name=me)

    assert kube.kubectl("get", "node", me, "-o", "name", kubeconfig=kubeconfig).strip() == f"node/{me}"

    # Its Lease: created, then renewed, in kube-node-lease of its RP.
    now = dt.datetime.now(dt.timezone.utc)
    lease: dict[str, object] = {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {"name": me, "namespace": "kube-node-lease"},
        "spec": {"holderIdentity": me, "leaseDurationSeconds": 40, "renewTime": now.strftime("%Y-%m-%dT%H:%M:%S.%fZ")},
    }
    kube.create(lease, kubeconfig=kubeconfig)
    renewed = (now + dt.timedelta(seconds=10)).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    kube.kubectl("patch", "lease", me, "-n", "kube-node-lease", "--type", "merge", "-p", json.dumps({"spec": {"renewTime": renewed}}), kubeconfig=kubeconfig)
    stored = json.loads(kube.kubectl("get", "lease", me, "-n", "kube-node-lease", "-o", "json", kubeconfig=kube.direct("rp1")))
    assert stored["spec"]["renewTime"] == renewed

    # Its pods, in a tenant of tp1 (a-m) and one of tp2 (n-z): one union list.
    mine = {f"acme{unique}-kl/web", f"nyx{unique}-kl/db"}
    for key in mine:
        namespace, name = key.split("/")
        kube.kubectl("create", "namespace", namespace)
        kube.create(pod(namespace, name, me))
    kube.create(pod(f"nyx{unique}-kl", "elsewhere", f"rp2-kl{unique}"))
    assert kube.kubectl("get", "pod", "db", "-n", f"nyx{unique}-kl", "-o", "name", kubeconfig=kube.direct("tp2")).strip()
    assert names(kube, "get", "pods", "-A", "--field-selector", f"spec.nodeName={me}", kubeconfig=kubeconfig) == mine


@pytest.mark.integration
def test_scheduler_kubeconfig_sees_its_tenant_partition_pods_all_nodes_and_binds_into_its_partition(kube: Kube, unique: str, tmp_path: Path) -> None:
    kubeconfig = client_kubeconfig(kube, tmp_path, user="system:kube-scheduler", groups=[], partition="tp2", role="scheduler")
    nodes = {f"rp1-sc{unique}", f"rp2-sc{unique}"}
    for name in nodes:
        kube.create(node(name))
    tp1_ns, tp2_ns = f"acme{unique}-sc", f"nyx{unique}-sc"
    for namespace in (tp1_ns, tp2_ns):
        kube.kubectl("create", "namespace", namespace)
    kube.create(pod(tp1_ns, "other-tp", f"rp1-sc{unique}"))
    kube.create(unbound_pod(tp2_ns, "pending"))

    # All RPs' nodes; only its own TP's pods.
    assert nodes <= names(kube, "get", "nodes", kubeconfig=kubeconfig)
    visible = names(kube, "get", "pods", "-A", kubeconfig=kubeconfig)
    assert f"{tp2_ns}/pending" in visible and f"{tp1_ns}/other-tp" not in visible

    binding: dict[str, object] = {"apiVersion": "v1", "kind": "Binding", "metadata": {"name": "pending", "namespace": tp2_ns}, "target": {"kind": "Node", "name": f"rp1-sc{unique}"}}
    # As client-go (the scheduler) does: POST with Content-Type, with the kubeconfig's embedded
    # credentials. (`kubectl create --raw` sends no Content-Type and the proxy forwards its body
    # as application/octet-stream, which kube-apiserver refuses with 415.)
    status, answer = post_json(kubeconfig, f"/api/v1/namespaces/{tp2_ns}/pods/pending/binding", binding, tmp_path)
    assert status == 201, answer
    bound = json.loads(kube.kubectl("get", "pod", "pending", "-n", tp2_ns, "-o", "json", kubeconfig=kube.direct("tp2")))
    assert bound["spec"]["nodeName"] == f"rp1-sc{unique}"


@pytest.mark.integration
def test_kubectl_create_raw_without_content_type_works_through_the_proxy_as_it_does_directly(kube: Kube, unique: str, tmp_path: Path) -> None:
    namespace = f"nyx{unique}-raw"
    kube.kubectl("create", "namespace", namespace)
    kube.create(unbound_pod(namespace, "pending"))
    binding = {"apiVersion": "v1", "kind": "Binding", "metadata": {"name": "pending"}, "target": {"kind": "Node", "name": f"rp1-raw{unique}"}}
    (tmp_path / "binding.json").write_text(json.dumps(binding))
    kube.kubectl("create", "--raw", f"/api/v1/namespaces/{namespace}/pods/pending/binding", "-f", str(tmp_path / "binding.json"))
