"""The resourceVersion scanner: every JSON or YAML body the test suite receives THROUGH A PROXY
is checked, independently of the proxy's own codecs, for the invariant of
docs/resource-versions.md:

- every resourceVersion is a valid RV (KEP-5504 / HaveValidResourceVersion: a positive decimal
  integer of at most 128 bits, no leading zeros);
- no resourceVersion of a merged resource is a native one (below 2**64): namespaced objects,
  Nodes, CSINodes, Namespaces and their lists.

Every proxy a test starts (`ProxyProcess.start`) is registered. Hooked into aiohttp's ClientResponse (whole bodies, which kubernetes-asyncio reads too, and
watch lines read with `content.readline()`) and into `Kube.kubectl` (JSON and YAML output).
Protobuf answers are checked by the client-go programs, which decode them with the real
client-go (tests/integration/test_client_go.py). `pytest_sessionfinish` fails the run on any
violation; the terminal summary prints the counts.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import yaml

from hack.proxy_process import ProxyProcess

NATIVE_LIMIT = 2**64
_MERGED_KINDS = {"Node", "CSINode", "Namespace", "NodeList", "CSINodeList", "NamespaceList"}
_CLUSTER_SCOPED_MARKERS = ("/nodes", "/csinodes", "/namespaces")


@dataclass
class Scanner:
    proxies: set[str] = field(default_factory=set)  # "host:port" of every proxy under test
    bodies: int = 0
    rvs: int = 0
    violations: list[str] = field(default_factory=list)

    def is_proxy(self, host: str | None, port: int | None) -> bool:
        return f"{host}:{port}" in self.proxies

    def scan_text(self, text: str | bytes, *, where: str, merged_url: bool) -> None:
        """Scan a JSON (or YAML) document, or newline-delimited JSON watch events."""
        docs = list(_documents(text))
        if not docs:
            return
        self.bodies += 1
        for doc in docs:
            self._walk(doc, where=where, merged=merged_url or _merged_object(doc), depth=0)

    def _walk(self, value: Any, *, where: str, merged: bool, depth: int) -> None:
        if isinstance(value, dict):
            merged = merged or _merged_object(value)
            if value.get("kind") == "Status":
                return
            for key, item in value.items():
                if key == "resourceVersion" and isinstance(item, str):
                    self._check(item, where=where, merged=merged)
                elif key == "managedFields":
                    continue
                elif key in ("annotations", "labels") and isinstance(item, dict):
                    continue
                else:
                    self._walk(item, where=where, merged=merged, depth=depth + 1)
        elif isinstance(value, list):
            for item in value:
                self._walk(item, where=where, merged=merged, depth=depth + 1)

    def _check(self, rv: str, *, where: str, merged: bool) -> None:
        self.rvs += 1
        if rv == "":
            return  # absent (e.g. a Table's metadata without RV)
        valid = rv.isascii() and rv.isdigit() and (rv == "0" or rv[0] != "0") and 0 < int(rv) < 2**128
        if not valid:
            self.violations.append(f"{where}: invalid resourceVersion {rv[:60]!r}")
        elif merged and int(rv) < NATIVE_LIMIT:
            self.violations.append(f"{where}: native resourceVersion {rv} of a merged resource")


def _documents(text: str | bytes) -> Iterator[Any]:
    if isinstance(text, bytes):
        text = text.decode(errors="replace")
    stripped = text.strip()
    if not stripped:
        return
    try:
        yield json.loads(stripped)
        return
    except ValueError:
        pass
    if stripped.startswith("{"):
        for line in stripped.splitlines():  # watch events, one per line
            try:
                yield json.loads(line)
            except ValueError:
                return
        return
    try:
        for doc in yaml.safe_load_all(stripped):
            if isinstance(doc, (dict, list)):
                yield doc
    except yaml.YAMLError:
        return


def _merged_object(doc: Any) -> bool:
    if not isinstance(doc, dict):
        return False
    if isinstance(doc.get("kind"), str) and doc["kind"] in _MERGED_KINDS:
        return True
    meta = doc.get("metadata")
    if isinstance(meta, dict) and meta.get("namespace"):
        return True
    obj = doc.get("object")  # a watch event, or a Table row
    if isinstance(obj, dict) and _merged_object(obj):
        return True
    for key in ("items", "rows"):  # a list of merged objects: its own RV is a merged one too
        items = doc.get(key)
        if isinstance(items, list) and any(_merged_object(i) for i in items):
            return True
    return False


def merged_path(path: str) -> bool:
    """Whether a request path is about a merged resource (anything in a namespace, nodes,
    csinodes, namespaces). Cluster-wide lists of namespaced resources are recognised by their
    items."""
    return "/namespaces/" in path or path.rstrip("/").endswith(_CLUSTER_SCOPED_MARKERS) or "/nodes/" in path or "/csinodes/" in path


SCANNER = Scanner()
# id(response.content) -> (the stream, where, merged path): StreamReader has __slots__
_STREAMS: dict[int, tuple[aiohttp.StreamReader, str, bool]] = {}


def install() -> None:
    """Hook aiohttp's client (test process only: the proxy runs in its own process)."""
    original_read = aiohttp.ClientResponse.read
    original_start = aiohttp.ClientResponse.start
    original_readline = aiohttp.StreamReader.readline

    async def read(self: aiohttp.ClientResponse) -> bytes:
        body = await original_read(self)
        if SCANNER.is_proxy(self.url.host, self.url.port) and _textual(self.headers.get("Content-Type", "")):
            SCANNER.scan_text(body, where=f"{self.method} {self.url.path_qs}", merged_url=merged_path(self.url.path))
        return body

    async def start(self: aiohttp.ClientResponse, connection: Any) -> aiohttp.ClientResponse:
        response = await original_start(self, connection)
        if SCANNER.is_proxy(self.url.host, self.url.port) and _textual(self.headers.get("Content-Type", "")):
            _STREAMS[id(self.content)] = (self.content, f"{self.method} {self.url.path_qs}", merged_path(self.url.path))
            if len(_STREAMS) > 10_000:  # streams of finished tests
                for key in list(_STREAMS)[:5_000]:
                    del _STREAMS[key]
        return response

    async def readline(self: aiohttp.StreamReader) -> bytes:
        line = await original_readline(self)
        tag = _STREAMS.get(id(self))
        if tag is not None and tag[0] is self and line.strip():
            SCANNER.scan_text(line, where=tag[1], merged_url=tag[2])
        return line

    original_proxy_start = ProxyProcess.start

    def proxy_start(self: ProxyProcess, timeout: float = 60.0) -> ProxyProcess:
        SCANNER.proxies.add(f"127.0.0.1:{self.port}")
        return original_proxy_start(self, timeout)

    ProxyProcess.start = proxy_start  # type: ignore[method-assign]
    aiohttp.ClientResponse.read = read  # type: ignore[method-assign]
    aiohttp.ClientResponse.start = start  # type: ignore[method-assign]
    aiohttp.StreamReader.readline = readline  # type: ignore[method-assign]


def _textual(content_type: str) -> bool:
    media = content_type.split(";", 1)[0].strip().lower()
    return media in ("application/json", "application/yaml")
