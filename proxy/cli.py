"""Command line: `partition-proxy serve --config FILE`.

Exit codes: 0 after a clean shutdown (SIGINT/SIGTERM), 2 when the configuration is unusable
(one line on stderr naming the field), 1 when start-up fails for another reason (one line).
"""

from __future__ import annotations

import argparse
import logging
import ssl
import sys
from pathlib import Path

from aiohttp import web

from config import ConfigError, load_config
from config.models import ListenConfig
from proxy.app import build_app


def server_ssl_context(listen: ListenConfig) -> ssl.SSLContext | None:
    """The downstream TLS context: serving certificate, and client certificates verified
    against the client CA when one is configured (optional, so health probes need none)."""
    if listen.tls is None:
        return None
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_3 if listen.tls.min_version == "1.3" else ssl.TLSVersion.TLSv1_2
    ctx.set_ciphers(listen.tls.ciphers)
    ctx.load_cert_chain(listen.tls.cert_file, listen.tls.key_file)
    if listen.tls.client_ca_file is not None:
        ctx.load_verify_locations(cafile=listen.tls.client_ca_file)
        ctx.verify_mode = ssl.CERT_OPTIONAL
    return ctx


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="partition-proxy", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    serve = sub.add_parser("serve", help="serve the federation described by a config file")
    serve.add_argument("--config", type=Path, required=True, help="YAML config file")
    serve.add_argument("--log-level", default="INFO")
    args = parser.parse_args(argv)

    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s %(message)s")
    try:
        config = load_config(args.config)
        ssl_context = server_ssl_context(config.listen)
        app = build_app(config)
    except ConfigError as exc:
        print(f"partition-proxy: config error: {exc}", file=sys.stderr)
        return 2
    except (OSError, ssl.SSLError) as exc:
        print(f"partition-proxy: config error: listen.tls: {exc}", file=sys.stderr)
        return 2
    try:
        web.run_app(
            app,
            host=config.listen.address,
            port=config.listen.port,
            ssl_context=ssl_context,
            access_log=None,
            print=None,
            # seconds; let in-flight requests finish on SIGTERM, but never hang on open watches.
            shutdown_timeout=5.0,
            # aiohttp's own parser limits sit above the configured ones, so requests between
            # the two get a Status from the proxy (414/431) instead of aiohttp's plain 400.
            handler_args={
                "max_line_size": 2 * config.limits.max_url_bytes,
                "max_field_size": 2 * config.limits.max_header_bytes,
            },
        )
    except Exception as exc:  # start-up failures: one line, no traceback (house rule 5)
        print(f"partition-proxy: start-up failed: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
