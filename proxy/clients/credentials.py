"""The proxy's own credential for a partition, from the partition's kubeconfig.

Loaded with kubernetes-asyncio's kubeconfig loader (client certificate and key, bearer token,
CA, TLS server name checks), so every kubeconfig form kubectl accepts works here too.
"""

from __future__ import annotations

import ssl
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from kubernetes_asyncio.client import Configuration
from kubernetes_asyncio.config import load_kube_config
from yarl import URL


@dataclass(frozen=True, slots=True)
class Credentials:
    """endpoints: the kubeconfig's server first, then `extra_servers` (HA kube-apiservers);
    ssl_context: False for plain http; auth_header: `Bearer <token>` or None (client
    certificate)."""

    endpoints: tuple[URL, ...]
    ssl_context: ssl.SSLContext | bool
    auth_header: str | None


def _ssl_context(cfg: Configuration) -> ssl.SSLContext | bool:
    if not (cfg.host or "").startswith("https"):
        return False
    ctx = ssl.create_default_context(cafile=cfg.ssl_ca_cert) if cfg.ssl_ca_cert else ssl.create_default_context()
    if not cfg.verify_ssl:
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    if cfg.cert_file:
        ctx.load_cert_chain(cfg.cert_file, cfg.key_file)
    return ctx


async def load_credentials(kubeconfig: Path, *, extra_servers: Sequence[str] = ()) -> Credentials:
    """Raises OSError or ValueError (from the loader or the TLS files) when the kubeconfig is
    unusable."""
    cfg = Configuration()
    await load_kube_config(config_file=str(kubeconfig), client_configuration=cfg, persist_config=False)
    auth = cfg.api_key.get("authorization") if cfg.api_key else None
    if auth and not auth.lower().startswith("bearer "):
        auth = "Bearer " + auth
    return Credentials(
        endpoints=(URL(cfg.host or ""), *(URL(u) for u in extra_servers)),
        ssl_context=_ssl_context(cfg),
        auth_header=auth,
    )
