"""The aiohttp forwarder: aiohttp's server in, aiohttp's ClientSession out (`bench.peers`)."""

from __future__ import annotations


import aiohttp
import uvloop
from aiohttp import web
from multidict import CIMultiDict

from bench.peers.common import DROP_REQUEST, DROP_RESPONSE, impersonation, parse_args, partition_of, serve, upstream_ssl


async def main() -> None:
    args = parse_args(__doc__ or "")
    connector = aiohttp.TCPConnector(ssl=upstream_ssl(args), limit=0)
    session = aiohttp.ClientSession(connector=connector, auto_decompress=False, skip_auto_headers=("User-Agent", "Accept-Encoding"))

    async def handle(request: web.BaseRequest) -> web.StreamResponse:
        headers = CIMultiDict((k, v) for k, v in request.headers.items() if k.lower() not in DROP_REQUEST)
        peercert = request.transport.get_extra_info("peercert") if request.transport is not None else None
        for key, value in impersonation(peercert):
            headers.add(key, value)
        body = await request.read()
        url = args.upstream[partition_of(request.raw_path)] + request.raw_path
        async with session.request(request.method, url, headers=headers, data=body or None, allow_redirects=False,
                                   skip_auto_headers=("Content-Type",)) as answer:
            data = await answer.read()
            out = CIMultiDict((k, v) for k, v in answer.headers.items() if k.lower() not in DROP_RESPONSE)
            return web.Response(status=answer.status, body=data, headers=out)

    await serve(handle, args)


if __name__ == "__main__":
    uvloop.run(main())
