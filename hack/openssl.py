"""The OpenSSL every local proxy runs with (hack/build-openssl.sh): OpenSSL 3.5, the series of the
image's base (python:3.11-slim, Debian 13), instead of this machine's OpenSSL 3.0, whose TLS
handshakes with a client certificate cost ~1.7x the CPU (1.53 vs 0.91 ms on this project's
machine, `python -m bench.tls_handshake`).

`proxy_env()` is the environment a proxy process (and a benchmark's peer forwarder, so both
sides of a comparison run the same TLS library) is started with: Python's _ssl and _hashlib
then load .local/openssl/lib's libssl.so.3 and libcrypto.so.3.
"""

from __future__ import annotations

import os
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
OPENSSL_LIB = REPO / ".local" / "openssl" / "lib"
OPENSSL_SERIES = "OpenSSL 3.5."  # what `ssl.OPENSSL_VERSION` starts with in a proxy started with proxy_env()


class OpenSSLMissing(RuntimeError):
    """hack/build-openssl.sh has not been run."""


def proxy_env() -> dict[str, str]:
    """{"LD_LIBRARY_PATH": ...} with .local/openssl/lib first. Raises OpenSSLMissing when it was
    not built (`bash hack/build-components.sh` builds it)."""
    if not (OPENSSL_LIB / "libssl.so.3").is_file():
        raise OpenSSLMissing(f"{OPENSSL_LIB}/libssl.so.3 is missing: run `bash hack/build-components.sh`")
    rest = os.environ.get("LD_LIBRARY_PATH", "")
    return {"LD_LIBRARY_PATH": f"{OPENSSL_LIB}:{rest}" if rest else str(OPENSSL_LIB)}
