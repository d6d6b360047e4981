"""Reading upstream bodies: newline-delimited watch events and bounded whole bodies."""

from __future__ import annotations

from collections.abc import AsyncIterator

import aiohttp


async def iter_lines(response: aiohttp.ClientResponse) -> AsyncIterator[bytes]:
    """Yield each newline-terminated line of a streaming body as it arrives (one JSON watch
    event per line, `k8s.io/apimachinery/pkg/runtime/serializer/json`). A trailing line without
    a newline is yielded at the end. Unlike StreamReader.readline this has no line length cap:
    a watch event is as large as its object (up to etcd's 1.5 MiB request limit)."""
    pending = b""
    async for chunk in response.content.iter_any():
        pending += chunk
        if b"\n" not in chunk:
            continue
        *lines, pending = pending.split(b"\n")
        for line in lines:
            if line.strip():
                yield line + b"\n"
    if pending.strip():
        yield pending + b"\n"
