"""`partition-proxy kubeconfig`: a ready-to-use kubeconfig that points a kubelet of a resource
partition, or a scheduler of a tenant partition, at the proxy.

The server URL carries the partition path prefix: a kubelet's
`https://proxy:6443/partitions/<rp>` pins its Node and Lease to its RP while its pod list stays
the union of all TPs; a scheduler's `https://proxy:6443/partitions/<tp>` keeps its pods and
bindings in its TP while its node list is the union of all RPs. The CA and the client
credentials are embedded (`*-data`), so the file works anywhere on its own.

Owns: validating the inputs (`KubeconfigError`, one line naming the flag), building the
kubeconfig document (`build_kubeconfig`, pure) and writing it (`write_kubeconfig`, mode 0600:
it holds a private key). Does not own: issuing certificates, or checking the certificate's
subject (CN `system:node:<name>` / O `system:nodes` for a kubelet, CN `system:kube-scheduler`
for a scheduler): the partitions' authorizers judge the identity on every request.
"""

from __future__ import annotations

import base64
import os
import re
import ssl
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlsplit

import yaml

from config.models import PartitionRole, ProxyConfig

Role = Literal["kubelet", "scheduler"]
ROLES: tuple[Role, ...] = ("kubelet", "scheduler")
# The role of the partition each client belongs to: kubelets run on machines (RPs), schedulers
# place tenants' pods (TPs).
PARTITION_ROLE: dict[Role, PartitionRole] = {"kubelet": PartitionRole.RESOURCE, "scheduler": PartitionRole.TENANT}
# The path prefix the proxy's RequestInfo parser strips (routing/requestinfo.py).
PARTITION_PREFIX = "/partitions/"
DEFAULT_SCHEDULER_NAME = "kube-scheduler"

# Partition names are DNS-1123 labels (config/models.py); node names DNS-1123 subdomains
# (Kubernetes validates Node names with IsDNS1123Subdomain: at most 253 characters).
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_PEM_CERT = b"-----BEGIN CERTIFICATE-----"
_PEM_KEY = re.compile(rb"-----BEGIN (RSA |EC |ENCRYPTED )?PRIVATE KEY-----")


class KubeconfigError(ValueError):
    """An input is unusable; `str(err)` is one line naming the flag."""


@dataclass(frozen=True, slots=True)
class Credentials:
    """PEM bytes: the CA that signed the proxy's serving certificate, the client certificate
    (chain) and its unencrypted private key."""

    ca_pem: bytes
    cert_pem: bytes
    key_pem: bytes


def partition_server(server: str, partition: str) -> str:
    """`server` (https://host[:port][/path]) with `/partitions/<partition>` appended.
    Raises KubeconfigError for a URL that is not https, has no host, carries a query, fragment
    or user info, or already holds a partition prefix."""
    if not _DNS_LABEL.match(partition):
        raise KubeconfigError(f"--partition: {partition!r} is not a DNS-1123 label (lower case letters, digits and '-')")
    try:
        url = urlsplit(server)
        url.port  # noqa: B018 - raises ValueError on a bad port
    except ValueError as exc:
        raise KubeconfigError(f"--server: {server!r} is not a URL: {exc}") from None
    if url.scheme != "https" or not url.hostname:
        raise KubeconfigError(f"--server: {server!r} must be https://host[:port] (the proxy serves TLS only)")
    if url.query or url.fragment or url.username or url.password:
        raise KubeconfigError(f"--server: {server!r} must not carry a query, fragment or user info")
    if PARTITION_PREFIX in url.path + "/":
        raise KubeconfigError(f"--server: {server!r} already has a partition path prefix; give the proxy's base URL")
    return f"{server.rstrip('/')}{PARTITION_PREFIX}{partition}"


def build_kubeconfig(*, server: str, partition: str, role: Role, name: str, credentials: Credentials) -> dict[str, Any]:
    """The kubeconfig document (a dict ready for YAML) of `role` client `name` in `partition`:
    one cluster (the proxy with the partition path prefix, CA embedded), one user (client
    certificate and key embedded), one current context. Raises KubeconfigError."""
    if role not in ROLES:
        raise KubeconfigError(f"--role: {role!r} is not one of {', '.join(ROLES)}")
    if not _DNS_SUBDOMAIN.match(name) or len(name) > 253:
        what = "a node name" if role == "kubelet" else "a name"
        raise KubeconfigError(f"--name: {name!r} is not {what} (a DNS-1123 subdomain: lower case letters, digits, '-' and '.')")
    url = partition_server(server, partition)
    cluster = f"partition-proxy-{partition}"
    user = f"{role}-{name}"
    context = f"{user}@{partition}"

    def b64(data: bytes) -> str:
        return base64.b64encode(data).decode("ascii")

    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": cluster, "cluster": {"server": url, "certificate-authority-data": b64(credentials.ca_pem)}}],
        "users": [
            {
                "name": user,
                "user": {
                    "client-certificate-data": b64(credentials.cert_pem),
                    "client-key-data": b64(credentials.key_pem),
                },
            }
        ],
        "contexts": [{"name": context, "context": {"cluster": cluster, "user": user}}],
        "current-context": context,
        "preferences": {},
    }


def _read(path: Path, flag: str) -> bytes:
    try:
        return path.read_bytes()
    except OSError as exc:
        raise KubeconfigError(f"{flag}: cannot read {path}: {exc.strerror}") from None


def _encrypted_key() -> bytes:
    raise KubeconfigError("--client-key: the key is encrypted; kubeconfigs need an unencrypted key")


def read_credentials(*, ca_file: Path, cert_file: Path, key_file: Path) -> Credentials:
    """Read the three PEM files and check them: the CA and the certificate parse, the key is
    unencrypted and belongs to the certificate. Raises KubeconfigError naming the flag."""
    ca_pem = _read(ca_file, "--ca-file")
    cert_pem = _read(cert_file, "--client-cert")
    key_pem = _read(key_file, "--client-key")
    if _PEM_CERT not in ca_pem:
        raise KubeconfigError(f"--ca-file: {ca_file} holds no PEM certificate")
    try:
        ssl.create_default_context().load_verify_locations(cadata=ca_pem.decode("ascii"))
    except (ssl.SSLError, ValueError) as exc:
        raise KubeconfigError(f"--ca-file: {ca_file} is not a usable CA certificate: {exc}") from None
    if _PEM_CERT not in cert_pem:
        raise KubeconfigError(f"--client-cert: {cert_file} holds no PEM certificate")
    if not _PEM_KEY.search(key_pem):
        raise KubeconfigError(f"--client-key: {key_file} holds no PEM private key")
    try:
        ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT).load_cert_chain(cert_file, key_file, password=_encrypted_key)
    except ssl.SSLError as exc:
        reason = exc.reason or str(exc)
        if "MISMATCH" in reason.upper():
            raise KubeconfigError(f"--client-key: {key_file} is not the key of {cert_file}") from None
        raise KubeconfigError(f"--client-cert: {cert_file} with {key_file} is unusable: {reason}") from None
    return Credentials(ca_pem=ca_pem, cert_pem=cert_pem, key_pem=key_pem)


def check_partition(config: ProxyConfig, *, partition: str, role: Role) -> None:
    """Check against the proxy's config that `partition` exists and suits `role` (a kubelet's
    partition is a resource partition, a scheduler's a tenant partition). Raises KubeconfigError."""
    roles = {p.name: p.role for p in config.partitions}
    if partition not in roles:
        raise KubeconfigError(f"--partition: {partition!r} is not a partition of the config ({', '.join(roles)})")
    want = PARTITION_ROLE[role]
    if roles[partition] is not want:
        raise KubeconfigError(f"--partition: a {role} belongs to a {want.value} partition; {partition!r} is a {roles[partition].value} partition")


def render(doc: dict[str, Any]) -> str:
    """The kubeconfig as YAML text."""
    return str(yaml.safe_dump(doc, sort_keys=False))


def write_kubeconfig(doc: dict[str, Any], output: str) -> None:
    """Write the kubeconfig to `output` ("-": stdout) with mode 0600, atomically (a temporary
    file in the same directory, then rename). Raises KubeconfigError naming -o."""
    text = render(doc)
    if output == "-":
        sys.stdout.write(text)
        return
    path = Path(output)
    directory = path.parent
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=directory)
    except OSError as exc:
        raise KubeconfigError(f"-o: cannot write into {directory}: {exc.strerror}") from None
    try:
        with os.fdopen(fd, "w") as out:  # mkstemp creates the file with mode 0600
            out.write(text)
        os.replace(tmp, path)
    except OSError as exc:
        Path(tmp).unlink(missing_ok=True)
        raise KubeconfigError(f"-o: cannot write {path}: {exc.strerror}") from None
