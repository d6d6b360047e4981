"""The proxy's HTTPS client for kubelets (config `kubelet`): what kube-apiserver's kubelet
client is to it (--kubelet-client-certificate, --kubelet-certificate-authority). Used for a
pod's log, exec, attach and port-forward (proxy/handlers/kubelet.py)."""

from __future__ import annotations

import asyncio
import contextlib
import ssl
from collections.abc import AsyncIterator, Sequence
from typing import NamedTuple

import aiohttp

from config.models import KubeletConfig, UpstreamConfig


class KubeletUnreachable(Exception):
    """The kubelet could not be connected to, or broke off before answering."""


class KubeletAnswer:
    """A kubelet's answer: `status`, `content_type`, the body whole (`read`) or as it comes."""

    def __init__(self, response: aiohttp.ClientResponse) -> None:
        self._response = response
        self.status = response.status
        self.content_type = response.headers.get("Content-Type", "text/plain")

    async def read(self) -> bytes:
        return await self._response.read()

    async def chunks(self) -> AsyncIterator[bytes]:
        """The body as it arrives; ends quietly when the kubelet goes away mid-stream."""
        try:
            async for chunk in self._response.content.iter_any():
                yield chunk
        except aiohttp.ClientError:
            return

    def close(self) -> None:
        self._response.close()


class KubeletClient:
    """One connection pool to every kubelet. Without `ca_file` kubelets' serving certificates
    are not verified (kube-apiserver without --kubelet-certificate-authority)."""

    def __init__(self, config: KubeletConfig, upstream: UpstreamConfig) -> None:
        self.config = config
        context = ssl.create_default_context(cafile=str(config.ca_file) if config.ca_file else None)
        if config.ca_file is None:
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE
        if config.client_cert_file is not None and config.client_key_file is not None:
            context.load_cert_chain(config.client_cert_file, config.client_key_file)
        self._ssl = context
        self._timeout = aiohttp.ClientTimeout(sock_connect=upstream.connect_timeout_seconds, sock_read=None)
        self._session: aiohttp.ClientSession | None = None

    @contextlib.asynccontextmanager
    async def get(self, address: str, path: str) -> AsyncIterator[KubeletAnswer]:
        """GET https://<address><path> (path with its query). Raises KubeletUnreachable."""
        try:
            response = await self._open().get(f"https://{address}{path}", ssl=self._ssl)
        except (aiohttp.ClientError, OSError) as exc:
            raise KubeletUnreachable(str(exc) or type(exc).__name__) from None
        try:
            yield KubeletAnswer(response)
        finally:
            response.release()

    @contextlib.asynccontextmanager
    async def websocket(self, address: str, path: str, protocols: tuple[str, ...]) -> AsyncIterator[KubeletWebSocket]:
        """A WebSocket to https://<address><path> offering `protocols` (the client's, in its
        order). Raises KubeletUnreachable, or KubeletRefused with the kubelet's answer."""
        session = self._open()
        try:
            ws = await session.ws_connect(f"https://{address}{path}", protocols=protocols, ssl=self._ssl, autoping=True, max_msg_size=0)
        except aiohttp.WSServerHandshakeError as exc:
            raise KubeletRefused(exc.status, exc.message) from None
        except (aiohttp.ClientError, OSError) as exc:
            raise KubeletUnreachable(str(exc) or type(exc).__name__) from None
        try:
            yield KubeletWebSocket(ws)
        finally:
            await ws.close()

    async def upgrade(self, address: str, path: str, upgrade: str, protocols: Sequence[str], *, method: str = "GET") -> Upgraded:
        """An HTTP/1.1 upgrade to `upgrade` (e.g. SPDY/3.1) of https://<address><path>, offering
        each of `protocols` as an X-Stream-Protocol-Version, as kube-apiserver's upgrade-aware
        proxy sends it: the connection once the kubelet answered 101, its bytes to relay as they
        are. Raises KubeletUnreachable, or KubeletRefused with the kubelet's status."""
        host, _, port = address.rpartition(":")
        host = host.strip("[]")
        try:
            reader, writer = await asyncio.wait_for(
                asyncio.open_connection(host, int(port), ssl=self._ssl, server_hostname=host if self.config.ca_file else None),
                self._timeout.sock_connect,
            )
        except (OSError, ValueError, asyncio.TimeoutError) as exc:
            raise KubeletUnreachable(str(exc) or type(exc).__name__) from None
        offered = "".join(f"X-Stream-Protocol-Version: {protocol}\r\n" for protocol in protocols)
        request = f"{method} {path} HTTP/1.1\r\nHost: {address}\r\nConnection: Upgrade\r\nUpgrade: {upgrade}\r\n{offered}\r\n"
        try:
            writer.write(request.encode())
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), self._timeout.sock_connect)
        except (OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, asyncio.TimeoutError) as exc:
            writer.close()
            raise KubeletUnreachable(str(exc) or type(exc).__name__) from None
        status_line = head.split(b"\r\n", 1)[0].decode(errors="replace")
        parts = status_line.split(" ", 2)
        status = int(parts[1]) if len(parts) > 1 and parts[1].isdigit() else 0
        if status != 101:
            writer.close()
            raise KubeletRefused(status, status_line)
        return Upgraded(reader, writer, head)

    def _open(self) -> aiohttp.ClientSession:
        if self._session is None:
            self._session = aiohttp.ClientSession(timeout=self._timeout, auto_decompress=False)
        return self._session

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()


class Upgraded(NamedTuple):
    """A connection to a kubelet after its 101: `head` is its answer as it came (status line and
    headers, up to the blank line); the kubelet's bytes after it are still in `reader`."""

    reader: asyncio.StreamReader
    writer: asyncio.StreamWriter
    head: bytes


class KubeletRefused(Exception):
    """The kubelet answered an upgrade (WebSocket or SPDY) with something else than 101."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(f"{status} {message}")
        self.status = status


class KubeletWebSocket:
    """A WebSocket to a kubelet: `protocol` it chose, binary messages both ways."""

    def __init__(self, ws: aiohttp.ClientWebSocketResponse) -> None:
        self._ws = ws
        self.protocol = ws.protocol or ""

    async def receive(self) -> bytes | None:
        """The next message; None once the kubelet closed (`close_code` says how)."""
        message = await self._ws.receive()
        if message.type is aiohttp.WSMsgType.BINARY:
            return bytes(message.data)
        if message.type is aiohttp.WSMsgType.TEXT:
            return str(message.data).encode()
        return None

    @property
    def close_code(self) -> int:
        return self._ws.close_code or 1000

    async def send(self, data: bytes) -> None:
        try:
            await self._ws.send_bytes(data)
        except (ConnectionError, aiohttp.ClientError) as exc:
            raise KubeletUnreachable(str(exc)) from None
