"""Command line: `partition-proxy serve --config FILE [--workers N] [--check-config]`,
`partition-proxy kubeconfig ...` and `partition-proxy size --nodes N --pods P ...` (the sizing
model of docs/sizing.md: proxy/sizing.py).

`serve --workers N` runs N worker processes on the one port (proxy/workers.py); the default is
the CPUs the process may use (affinity and cgroup quota); `--workers 1` serves in this process.
The proxy itself (`proxy.app` and all it imports: aiohttp, uvloop, prometheus-client, the fronts
and caches) is imported where it runs, not by this module: the supervisor of N workers imports
only the config, the sizing model and `proxy.workers`, and leaves the deeper start-up checks
(the caches' selectors) to a `--check-config` child, so the process that lives as long
as the replica holds ~37 MiB of RSS instead of ~92 MiB (docs/sizing.md, "The model").

Exit codes: 0 after a clean shutdown (SIGINT/SIGTERM), 2 when the configuration is unusable
(one line on stderr naming the field), 1 when start-up fails for another reason (one line).
`serve --check-config` validates the config and exits: 0 printing `config OK`, or 2 with the
one-line error. `kubeconfig` writes a client kubeconfig (proxy/kubeconfig_cmd.py): 0, or 2 with
one line naming the flag.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import faulthandler
import json
import logging
import os
import signal
import ssl
import subprocess
import sys
from asyncio import sslproto
from collections.abc import Callable
from pathlib import Path

from config import ConfigError, load_config
from config.models import ListenConfig, ProxyConfig
from proxy.allocator import tune_allocator
from proxy.sizing import Federation, estimate
from proxy.workers import WORKER_ENV, available_cpus, run_workers
from proxy.kubeconfig_cmd import (
    DEFAULT_SCHEDULER_NAME,
    ROLES,
    KubeconfigError,
    build_kubeconfig,
    check_partition,
    read_credentials,
    write_kubeconfig,
)


log = logging.getLogger("partition_proxy.cli")

# seconds a worker of `serve --workers N` waits for its resourceVersion table before it listens
# anyway: the table loads in well under a second from a reachable system partition; 10 s stays
# well inside the chart's liveness budget (5 s initial delay + 3 failed checks 10 s apart).
WORKER_LISTEN_WAIT_SECONDS = 10.0

# `serve --event-loop`: asyncio's selector loop or uvloop's libuv loop. uvloop by default:
# bench/routed_requests.py measured 32 % more forwarded GETs per second at concurrency 1 and 23 %
# less proxy CPU per GET, and an idle HTTP/1.1 watch costs 62 KB of RSS instead of 72 KB
# (docs/benchmarks.md, "Speed: forwarded requests, workers and the event loop").
EVENT_LOOPS = ("asyncio", "uvloop")
DEFAULT_EVENT_LOOP = "uvloop"

# bytes; the read buffer asyncio allocates for EVERY TLS connection (asyncio.sslproto.
# SSLProtocol.max_size, 256 KiB in CPython 3.11). Idle watch connections dominate a proxy's
# connections, and a TLS record carries at most 16 KiB, so 16 KiB reads lose nothing while
# each connection holds 240 KiB less (bench/watch_fanout.py measured 315 KiB per idle watcher
# before).
SSL_READ_BUFFER = 16 * 1024


def shrink_ssl_read_buffers() -> None:
    """Set asyncio's per-connection TLS read buffer to SSL_READ_BUFFER (process-wide)."""
    sslproto.SSLProtocol.max_size = SSL_READ_BUFFER


def server_ssl_context(listen: ListenConfig, *, alpn: bool = True) -> ssl.SSLContext | None:
    """The downstream TLS context: serving certificate, and client certificates verified
    against the client CA when one is configured (optional, so health probes need none); with
    `alpn`, offering the protocols the fronts serve (without: a check of the files alone, which
    needs no front imported). Raises OSError, ssl.SSLError."""
    if listen.tls is None:
        return None
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_3 if listen.tls.min_version == "1.3" else ssl.TLSVersion.TLSv1_2
    ctx.set_ciphers(listen.tls.ciphers)
    ctx.load_cert_chain(listen.tls.cert_file, listen.tls.key_file)
    # No TLS 1.3 session tickets (OpenSSL sends 2 after every full handshake by default): no
    # Kubernetes client resumes a session (client-go sets no ClientSessionCache, Python's ssl
    # takes a session only when handed one), so each ticket, which carries the client's
    # certificate, is CPU spent for nothing: bench.tls_handshake, 2026-11-30.
    ctx.num_tickets = 0
    if listen.tls.client_ca_file is not None:
        ctx.load_verify_locations(cafile=listen.tls.client_ca_file)
        ctx.verify_mode = ssl.CERT_OPTIONAL
    if alpn:
        from proxy.fronts.listener import offer_alpn

        offer_alpn(ctx, http2=listen.http2.enabled)
    return ctx


def main(argv: list[str] | None = None) -> int:
    """Run the command line `argv` (default: sys.argv[1:]); the exit code (module docstring)."""
    args = _parser().parse_args(argv)
    if args.command == "kubeconfig":
        return _kubeconfig(args)
    if args.command == "size":
        return _size(args)
    if args.check_config:
        return _check_config(args.config)
    return _serve(args)


def _parser() -> argparse.ArgumentParser:
    """The `partition-proxy` parser: the `serve` and `kubeconfig` subcommands."""
    parser = argparse.ArgumentParser(prog="partition-proxy", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    _add_serve_flags(sub.add_parser("serve", help="serve the federation described by a config file"))
    _add_kubeconfig_flags(sub.add_parser(
        "kubeconfig",
        help="write a kubeconfig for a kubelet (of a resource partition) or a scheduler (of a tenant partition)",
        description="Write a kubeconfig whose server URL carries the partition path prefix "
        "/partitions/<name>, with the CA and the client credentials embedded.",
    ))
    _add_size_flags(sub.add_parser(
        "size",
        help="replicas, cores, memory, watches and connections of a proxy tier for a federation (docs/sizing.md)",
        description="The sizing model of docs/sizing.md, every coefficient from a committed benchmark run.",
    ))
    return parser


def _add_size_flags(size: argparse.ArgumentParser) -> None:
    """The flags of `size`."""
    size.add_argument("--nodes", type=_non_negative_int, required=True, help="nodes (one kubelet each)")
    size.add_argument("--pods", type=_non_negative_int, required=True, help="pods, federation-wide")
    size.add_argument("--tenant-partitions", type=_positive_int, required=True)
    size.add_argument("--resource-partitions", type=_positive_int, required=True)
    size.add_argument("--kubelets-per-replica", type=_positive_int, default=Federation.kubelets_per_replica)
    size.add_argument("--pods-started-per-second", type=float, default=Federation.pods_started_per_second,
                      help="pod churn, federation-wide")
    size.add_argument("--workers", type=_positive_int, default=Federation.workers, help="worker processes per replica")
    size.add_argument("--node-leases-cache", action="store_true",
                      help="the proxy's caches include a node-leases cache (not a default: docs/sizing.md)")


def _size(args: argparse.Namespace) -> int:
    """`size`: the estimate as JSON on stdout. Errors: one line, 2."""
    try:
        answer = estimate(Federation(
            nodes=args.nodes, pods=args.pods, tenant_partitions=args.tenant_partitions,
            resource_partitions=args.resource_partitions, kubelets_per_replica=args.kubelets_per_replica,
            pods_started_per_second=args.pods_started_per_second, workers=args.workers,
            node_leases_cache=args.node_leases_cache,
        ))
    except ValueError as exc:
        print(f"partition-proxy size: {exc}", file=sys.stderr)
        return 2
    print(json.dumps(answer.as_dict(), indent=2))
    return 0


def _add_serve_flags(serve: argparse.ArgumentParser) -> None:
    """The flags of `serve`."""
    serve.add_argument("--config", type=Path, required=True, help="YAML config file")
    serve.add_argument("--log-level", default="INFO")
    serve.add_argument(
        "--workers",
        type=_positive_int,
        default=None,
        help="worker processes sharing the port (SO_REUSEPORT), each with its own caches; "
        "default: the CPUs this process may use",
    )
    serve.add_argument(
        "--event-loop",
        choices=EVENT_LOOPS,
        default=DEFAULT_EVENT_LOOP,
        help=f"asyncio's own event loop or uvloop's (libuv); default {DEFAULT_EVENT_LOOP} (docs/benchmarks.md)",
    )
    serve.add_argument("--reuse-port", action="store_true", help=argparse.SUPPRESS)  # set for each worker
    serve.add_argument(
        "--check-config",
        action="store_true",
        help="validate the config (fields, partitions, cache selectors) and exit: 0 printing `config OK`, "
        "or 2 with one line; reads no kubeconfig or TLS file and opens no connection",
    )


def _add_kubeconfig_flags(kubeconfig: argparse.ArgumentParser) -> None:
    """The flags of `kubeconfig`."""
    # Required flags are checked by _kubeconfig, not argparse, so a missing one is one line too.
    kubeconfig.add_argument("--server", help="the proxy's base URL, e.g. https://proxy:6443 (required)")
    kubeconfig.add_argument("--ca-file", type=Path, help="CA of the proxy's serving certificate, PEM (required)")
    kubeconfig.add_argument("--client-cert", type=Path, help="client certificate, PEM (required)")
    kubeconfig.add_argument("--client-key", type=Path, help="its unencrypted private key, PEM (required)")
    kubeconfig.add_argument("--partition", help="kubelet: its resource partition; scheduler: its tenant partition (required)")
    kubeconfig.add_argument("--role", help=f"{' or '.join(ROLES)} (required)")
    kubeconfig.add_argument("--name", help=f"kubelet: its node name (required); scheduler: a name (default {DEFAULT_SCHEDULER_NAME})")
    kubeconfig.add_argument("--config", type=Path, help="the proxy's config: check the partition exists and has the right role")
    kubeconfig.add_argument("-o", "--output", default="-", help="output file (mode 0600), '-' for stdout (default)")


def _serve(args: argparse.Namespace) -> int:
    """`serve`: load the config and check it as far as start-up can before any I/O (exit 2 on
    an error), then run the workers of `--workers N`, or the proxy in this process until a
    signal stops it (exit 0; 1 when start-up fails)."""
    tune_allocator()  # first: before the config and caches allocate
    faulthandler.enable()  # a crash in a C extension (uvloop, orjson, ssl) leaves its Python stack on stderr
    signal.signal(signal.SIGHUP, signal.SIG_IGN)  # a reload, never a hang-up, even before the loop handles it
    worker = os.environ.get(WORKER_ENV)
    tag = f" [worker {worker}]" if worker is not None else ""
    logging.basicConfig(level=args.log_level.upper(), format=f"%(asctime)s %(levelname)s %(name)s{tag} %(message)s")
    try:
        config = load_config(args.config)
        ssl_context = server_ssl_context(config.listen, alpn=False)
    except ConfigError as exc:
        print(f"partition-proxy: config error: {exc}", file=sys.stderr)
        return 2
    except (OSError, ssl.SSLError) as exc:
        print(f"partition-proxy: config error: listen.tls: {exc}", file=sys.stderr)
        return 2
    workers = args.workers if args.workers is not None else available_cpus()
    if workers > 1:
        # the caches' check imports the whole proxy: in a child, which exits (the module
        # docstring), printing its one line when a cache is unusable
        checked = subprocess.run([sys.executable, "-m", "proxy.cli", "serve", "--config", str(args.config), "--check-config"],
                                 stdout=subprocess.DEVNULL, check=False)
        if checked.returncode != 0:
            return checked.returncode
        _log_tls_library()  # once per replica
        worker_argv = ["serve", "--config", str(args.config), "--log-level", args.log_level, "--event-loop", args.event_loop,
                       "--workers", "1", "--reuse-port"]
        return run_workers(worker_argv, workers, config.failure.shutdown_drain_seconds + config.failure.shutdown_grace_seconds)
    try:
        ssl_context = server_ssl_context(config.listen)
        _check_caches(config)
    except ConfigError as exc:
        print(f"partition-proxy: config error: {exc}", file=sys.stderr)
        return 2
    if worker is None:  # once per replica (a worker's supervisor logged it)
        _log_tls_library()
    shrink_ssl_read_buffers()
    try:
        with asyncio.Runner(loop_factory=_loop_factory(args.event_loop)) as runner:
            runner.run(run_proxy(config, ssl_context, reuse_port=args.reuse_port, config_path=args.config))
    except Exception as exc:  # start-up failures: one line, no traceback
        print(f"partition-proxy: start-up failed: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    return 0


# (major, minor): the OpenSSL below which start-up warns. OpenSSL 3.0 decodes X.509 certificates
# through its provider decoders: a TLS handshake with a client certificate costs this proxy
# ~1.5 ms of CPU with 3.0.19 against ~1.0 ms with 3.5.5 (bench/tls_handshake.py on this
# project's 2-core machine), which a reconnect storm of thousands of kubelets pays per connection.
TLS_LIBRARY_WANTED = (3, 5)


def _log_tls_library() -> None:
    """Log the OpenSSL Python's ssl module runs on; a warning below TLS_LIBRARY_WANTED."""
    found = ssl.OPENSSL_VERSION_INFO[:2]
    if found < TLS_LIBRARY_WANTED:
        log.warning("TLS by %s: TLS handshakes cost about 1.5x the CPU they cost with OpenSSL %d.%d or later "
                    "(the image's python:3.11-slim has 3.5)", ssl.OPENSSL_VERSION, *TLS_LIBRARY_WANTED)
    else:
        log.info("TLS by %s", ssl.OPENSSL_VERSION)


def _loop_factory(name: str) -> Callable[[], asyncio.AbstractEventLoop] | None:
    """The event loop factory of `--event-loop` (None: asyncio's default)."""
    if name == "uvloop":
        import uvloop  # an optional speed-up, imported only when asked for

        return uvloop.new_event_loop
    return None


def _non_negative_int(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError("must not be negative")
    return value


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError("must be at least 1")
    return value


async def run_proxy(config: ProxyConfig, ssl_context: ssl.SSLContext | None, *, reuse_port: bool = False,
                    config_path: Path | None = None) -> None:
    """Run the proxy until SIGINT or SIGTERM, then stop gracefully: client connections are let
    go one by one over up to `failure.shutdown_drain_seconds` (their watches end cleanly), and
    each one's other requests in flight get `failure.shutdown_grace_seconds`. SIGHUP re-reads
    `config_path` (the partition set changes at runtime: proxy.partition_set)."""
    from proxy.app import ProxyApp

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    hangups: list[None] = []  # a SIGHUP during start-up is a reload once started
    loop.add_signal_handler(signal.SIGHUP, hangups.append, None)
    app = await ProxyApp.start(config, config_path=config_path)
    loop.add_signal_handler(signal.SIGHUP, app.partition_set.reload_soon)
    if hangups:
        app.partition_set.reload_soon()
    try:
        if reuse_port:
            # A worker among several: the kernel hands it connections as soon as it listens, and
            # until its resourceVersion table is loaded it could only answer them with errors
            # that a sibling would not give; so it listens once loaded (or after
            # WORKER_LISTEN_WAIT_SECONDS, so that /readyz and /livez answer whatever happens).
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(app.ctx.rv.ready.wait(), WORKER_LISTEN_WAIT_SECONDS)
        await app.listen(config.listen.address, config.listen.port, ssl_context=ssl_context, reuse_port=reuse_port)
        await stop.wait()
    finally:
        await app.stop(config.failure.shutdown_grace_seconds, config.failure.shutdown_drain_seconds)


def _check_caches(config: ProxyConfig) -> None:
    """Build the watch caches of a loaded config, as start-up does before any I/O. Raises
    ConfigError naming the field (a bad cache selector)."""
    from proxy.app import build_caches, build_resource_versions

    build_caches(config, build_resource_versions(config))


def _check_config(path: Path) -> int:
    """`serve --check-config`: load_config plus building the watch caches (their selectors),
    as start-up does before it opens any connection (not the TLS files: a config is checked
    where its Secrets are not mounted)."""
    try:
        _check_caches(load_config(path))
    except ConfigError as exc:
        print(f"partition-proxy: config error: {exc}", file=sys.stderr)
        return 2
    print("config OK")
    return 0


def _kubeconfig(args: argparse.Namespace) -> int:
    """`kubeconfig`: validate the inputs, build the document, write it. Errors: one line, 2."""
    try:
        for flag in ("server", "ca_file", "client_cert", "client_key", "partition", "role"):
            if getattr(args, flag) in (None, ""):
                raise KubeconfigError(f"--{flag.replace('_', '-')}: required")
        if args.role not in ROLES:
            raise KubeconfigError(f"--role: {args.role!r} is not one of {', '.join(ROLES)}")
        name = args.name
        if name is None:
            if args.role == "kubelet":
                raise KubeconfigError("--name: a kubelet's kubeconfig needs its node name")
            name = DEFAULT_SCHEDULER_NAME
        if args.config is not None:
            try:
                config = load_config(args.config)
            except ConfigError as exc:
                raise KubeconfigError(f"--config: {exc}") from None
            check_partition(config, partition=args.partition, role=args.role)
        credentials = read_credentials(ca_file=args.ca_file, cert_file=args.client_cert, key_file=args.client_key)
        doc = build_kubeconfig(server=args.server, partition=args.partition, role=args.role, name=name, credentials=credentials)
        write_kubeconfig(doc, args.output)
    except KubeconfigError as exc:
        print(f"partition-proxy: kubeconfig: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
