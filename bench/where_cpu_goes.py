"""Where a routed request's CPU goes, in the proxy and in the lean peer, part by part, measured in
the same run: the account a reader needs before calling a per-request target out of reach.

Set-up as `bench.routed_requests` (tp1, rp1; the proxy and `bench.peers.lean_forwarder`, one
process each). For each side in turn, `rvcheck requests` (client-go, protobuf) sends `--op` at
concurrency 16 for `--seconds`, while py-spy samples the side's process with native frames
(`--native`: uvloop's and OpenSSL's C code and the system calls show as themselves). Each sample
is given to one part, the first rule that matches from the innermost frame out:

- `write()` / `read()` system calls, `epoll` (the loop waiting: left out of the account);
- TLS (libssl, libcrypto, the ssl module);
- the innermost Python frame's module, named by what it is: the HTTP/1.1 front (aiohttp's
  server), the HTTP/2 front, the pipeline's steps, routing, resourceVersion translation
  (routing.protobuf, rvjson, translate, rv), the partition transport, the watch caches and
  reflectors, metrics, the lean peer's own code;
- the event loop and the interpreter (C frames under no Python frame of the above).

A part's microseconds per request = the side's CPU per request (from /proc, measured over the
same seconds) x its share of the non-idle samples. The proxy's column minus the lean peer's is
what the proxy adds, part by part.

`--watching`: a third side, `proxy-watching`. The same load goes straight to the partition
while py-spy samples the proxy, which routes nothing then: its CPU per request is what its
watch caches pay for a write made elsewhere (the event: reading the stream, decoding, recording),
part by part. A write routed through the proxy pays it as well.

`--pin`: as `bench.routed_requests --pin`, the proxy and the lean peer on the last CPU, the
partitions, the load client and py-spy on the first. py-spy samples wall time, so unpinned, a
side preempted by a partition it just woke (a write to it) is sampled inside that write; pinned,
the side's core is its own and its samples follow its CPU.

`--qps Q`: the load client paces its workers at Q requests per second together (as
`bench.routed_requests --qps`), so that both sides are sampled at one rate.

Run: `python -m bench.where_cpu_goes [--op get|renew-lease|patch-status] [--client-protocol h2|http/1.1]
[--seconds 12] [--qps 0] [--watching] [--pin]`. Needs py-spy (`pip install py-spy`). The samples of each side stay
in `.local/bench/routed_requests/where_cpu_goes-<side>.raw` (py-spy's collapsed stacks).
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from bench.common import WORK_DIR, emit, group_cpu_seconds, host_info, install_sigterm, log
from bench.routed_requests import (
    ARTIFACTS,
    LEASE_NAMESPACE,
    NAMESPACE,
    PEER_MODULES,
    RVCHECK,
    Peer,
    create_objects,
    pin,
)
from hack.federation import PROXY_ADMINS_GROUP, Federation
from hack.proxy_process import ProxyProcess

NAME = "where_cpu_goes"
OBJECTS = 16
PY_SPY = Path(shutil.which("py-spy") or Path(sys.executable).parent / "py-spy")  # the venv's, when not on PATH
_PYSPY_RATE = 250  # samples per second: enough for ~3,000 samples per side, little overhead

# (part, rule) in order; a rule matches a frame's (function, file) text. Python frames are
# "function (path/file.py:line)", native ones "function (library or file.c:line)".
_PARTS: list[tuple[str, re.Pattern[str]]] = [
    ("syscall write", re.compile(r"^(write|writev|sendmsg|send) \(")),
    ("syscall read", re.compile(r"^(read|readv|recvmsg|recv) \(")),
    ("idle (epoll)", re.compile(r"epoll")),
    ("TLS", re.compile(r"libssl|libcrypto|\bssl\.py|_ssl\.c")),
    ("RV translation", re.compile(r"routing/(protobuf|protobuf_items|rvjson|translate|rv)\.py")),
    ("routing", re.compile(r"routing/\w+\.py")),
    ("watch caches and reflectors", re.compile(r"proxy/cache/|proxy/clients/watch\.py")),
    ("partition transport", re.compile(r"proxy/clients/\w+\.py|httptools|llhttp")),
    ("metrics", re.compile(r"proxy/metrics")),
    ("HTTP/2 front", re.compile(r"proxy/fronts/http2")),
    ("HTTP/1.1 front (aiohttp server)", re.compile(r"proxy/fronts/http1\.py|aiohttp/|_http_parser|_http_writer|multidict|yarl")),
    ("pipeline and handlers", re.compile(r"proxy/\w+(/\w+)*\.py")),
    ("lean peer's own code", re.compile(r"bench/peers/")),
    ("event loop (uvloop, asyncio)", re.compile(r"uvloop|loop\.c|asyncio|_asynciomodule")),
]


def part_of(stack: list[str]) -> str:
    """The part a sample is given to (module docstring): the first rule matching a frame, innermost first."""
    for frame in reversed(stack):
        for part, rule in _PARTS:
            if rule.search(frame):
                return part
    return "interpreter and other C"


def account(raw: Path) -> collections.Counter[str]:
    """Samples per part of a py-spy raw (collapsed stacks) file."""
    counts: collections.Counter[str] = collections.Counter()
    for line in raw.read_text().splitlines():
        stack, _, n = line.rpartition(" ")
        frames = [f for f in stack.split(";") if not f.startswith(("process ", "thread "))]
        if frames and n.isdigit():
            counts[part_of(frames)] += int(n)
    return counts


def busy_parts(counts: collections.Counter[str], cpu_us: float) -> dict[str, float]:
    """`cpu_us` (microseconds of a side's CPU per unit: a request, a kubelet-second) split over
    the parts of `account` in proportion to their non-idle samples, the largest first."""
    busy = sum(n for part, n in counts.items() if part != "idle (epoll)")
    if not busy:
        return {}
    return {part: round(cpu_us * n / busy, 1) for part, n in counts.most_common() if part != "idle (epoll)"}


def _measure(side: str, pid: int, kubeconfig: Path, args: argparse.Namespace) -> dict[str, Any]:
    """`side`'s CPU per request and its parts: the load through `kubeconfig`, py-spy on `pid`."""
    lease_op = args.op == "renew-lease"
    names = [f"rp1-bench-{i}" if lease_op else f"bench-{i}" for i in range(OBJECTS)]
    report = ARTIFACTS / f"{NAME}-{side}.json"
    raw = ARTIFACTS / f"{NAME}-{side}.raw"
    argv = [str(RVCHECK), "requests", "--kubeconfig", str(kubeconfig), "--op", args.op,
            "--namespace", LEASE_NAMESPACE if lease_op else NAMESPACE, "--names", ",".join(names),
            "--concurrency", "16", "--connections", "16", "--duration", f"{args.seconds + 4}s", "--warmup", "2s",
            "--qps", f"{args.qps:g}"]
    env = {**os.environ, "DISABLE_HTTP2": "1"} if args.client_protocol == "http/1.1" else None
    with report.open("wb") as out:
        client = subprocess.Popen(argv, stdout=out, stderr=subprocess.DEVNULL, env=env)
        time.sleep(3)
        cpu0, t0 = group_cpu_seconds(pid), time.monotonic()
        subprocess.run([args.py_spy, "record", "-p", str(pid), "--native", "-r", str(_PYSPY_RATE), "-d", str(args.seconds),
                        "-f", "raw", "-o", str(raw)], check=True, capture_output=True)
        cpu1, t1 = group_cpu_seconds(pid), time.monotonic()
        client.wait(timeout=args.seconds + 60)
    doc = json.loads(report.read_bytes())
    rate = doc["requests_per_second"]
    cpu_per_request_us = (cpu1 - cpu0) / ((t1 - t0) * rate) * 1e6
    counts = account(raw)
    parts = busy_parts(counts, cpu_per_request_us)
    log(f"{side}: {rate}/s, {cpu_per_request_us:.0f} us of CPU per request; " + ", ".join(f"{p} {v}" for p, v in parts.items()))
    return {"requests_per_second": rate, "cpu_us_per_request": round(cpu_per_request_us, 1), "samples": dict(counts), "parts_us": parts}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--op", default="get", choices=("get", "renew-lease", "patch-status"))
    ap.add_argument("--client-protocol", default="http/1.1", choices=("h2", "http/1.1"))
    ap.add_argument("--seconds", type=int, default=12)
    ap.add_argument("--qps", type=float, default=0.0,
                    help="the load client's requests per second, all workers together (0: as fast as answers come)")
    ap.add_argument("--pin", action="store_true", help="the proxy and the lean peer on a CPU of their own (module docstring)")
    ap.add_argument("--watching", action="store_true",
                    help="also the proxy while the load goes straight to the partition (module docstring)")
    ap.add_argument("--py-spy", default=str(PY_SPY))
    args = ap.parse_args()
    if not Path(args.py_spy).exists():
        ap.error("py-spy not found: pip install py-spy")
    cpus = sorted(os.sched_getaffinity(0))
    if args.pin and len(cpus) < 2:
        ap.error("--pin needs two CPUs")
    if args.pin:  # this process, and so the federation, the load client and py-spy, on the first CPU
        os.sched_setaffinity(0, {cpus[0]})
    install_sigterm()
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
    fed = Federation(WORK_DIR / NAME, tenant_partitions=1, resource_partitions=1)
    proxy: ProxyProcess | None = None
    peer: Peer | None = None
    try:
        fed.start()
        proxy = ProxyProcess(fed, fed.root / "proxy", workers=1).start(timeout=180)
        peer = Peer(fed, PEER_MODULES["lean"], fed.root / "lean", 1).start(fed.ca_file)
        assert proxy.popen is not None
        if args.pin:
            pin([proxy.popen.pid, *peer.sessions()], {cpus[-1]})
        asyncio.run(create_objects(fed, OBJECTS))
        sides = {
            "proxy": (proxy.popen.pid, fed.issue_client_kubeconfig("cpu-proxy", user="admin", groups=[PROXY_ADMINS_GROUP], server=proxy.server)),
            "lean": (peer.popens[0].pid, fed.issue_client_kubeconfig("cpu-lean", user="admin", groups=[PROXY_ADMINS_GROUP], server=peer.server)),
        }
        if args.watching:
            direct = fed.partition("rp1" if args.op == "renew-lease" else "tp1").admin_kubeconfig
            sides["proxy-watching"] = (proxy.popen.pid, direct)
        results = {side: _measure(side, pid, kubeconfig, args) for side, (pid, kubeconfig) in sides.items()}
    finally:
        if peer is not None:
            peer.stop()
        if proxy is not None:
            proxy.stop()
        fed.stop()
    parts = sorted({*results["proxy"]["parts_us"], *results["lean"]["parts_us"]},
                   key=lambda p: -results["proxy"]["parts_us"].get(p, 0.0))
    table = [{"part": p, "proxy_us": results["proxy"]["parts_us"].get(p, 0.0), "lean_us": results["lean"]["parts_us"].get(p, 0.0),
              "added_us": round(results["proxy"]["parts_us"].get(p, 0.0) - results["lean"]["parts_us"].get(p, 0.0), 1)} for p in parts]
    emit(NAME, {
        "benchmark": NAME,
        "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "host": host_info(),
        "params": {k: v for k, v in vars(args).items() if k != "py_spy"},
        "peer": "the lean forwarder (bench.peers.lean_forwarder), one process, the same client and partitions",
        "sides": results,
        "parts": table,
        "total_seconds": round(time.monotonic() - t0, 1),
    })


if __name__ == "__main__":
    main()
