"""A minimal SPDY/3.1 server side for tests: enough of a kubelet's port-forward and exec
(SYN_STREAM -> SYN_REPLY, DATA, FIN, PING) to check that the proxy relays kubectl's SPDY
session byte for byte. Frame layout and header compression as moby/spdystream (draft-mbelshe-httpbis-spdy-00,
section 2.6.10.1: zlib with the SPDY/3 dictionary, one compression context per direction)."""

from __future__ import annotations

import asyncio
import json
import struct
import zlib

# The SPDY/3 header compression dictionary (github.com/moby/spdystream/spdy/dictionary.go).
DICTIONARY = bytes.fromhex(
    "000000076f7074696f6e73000000046865616400000004706f7374000000037075740000000664656c65746500000005"
    "7472616365000000066163636570740000000e6163636570742d636861727365740000000f6163636570742d656e636f"
    "64696e670000000f6163636570742d6c616e67756167650000000d6163636570742d72616e6765730000000361676500"
    "000005616c6c6f770000000d617574686f72697a6174696f6e0000000d63616368652d636f6e74726f6c0000000a636f"
    "6e6e656374696f6e0000000c636f6e74656e742d6261736500000010636f6e74656e742d656e636f64696e6700000010"
    "636f6e74656e742d6c616e67756167650000000e636f6e74656e742d6c656e67746800000010636f6e74656e742d6c6f"
    "636174696f6e0000000b636f6e74656e742d6d64350000000d636f6e74656e742d72616e67650000000c636f6e74656e"
    "742d74797065000000046461746500000004657461670000000665787065637400000007657870697265730000000466"
    "726f6d00000004686f73740000000869662d6d617463680000001169662d6d6f6469666965642d73696e63650000000d"
    "69662d6e6f6e652d6d617463680000000869662d72616e67650000001369662d756e6d6f6469666965642d73696e6365"
    "0000000d6c6173742d6d6f646966696564000000086c6f636174696f6e0000000c6d61782d666f727761726473000000"
    "06707261676d610000001270726f78792d61757468656e7469636174650000001370726f78792d617574686f72697a61"
    "74696f6e0000000572616e676500000007726566657265720000000b72657472792d6166746572000000067365727665"
    "7200000002746500000007747261696c6572000000117472616e736665722d656e636f64696e67000000077570677261"
    "64650000000a757365722d6167656e74000000047661727900000003766961000000077761726e696e67000000107777"
    "772d61757468656e746963617465000000066d6574686f64000000036765740000000673746174757300000006323030"
    "204f4b0000000776657273696f6e00000008485454502f312e310000000375726c000000067075626c69630000000a73"
    "65742d636f6f6b69650000000a6b6565702d616c697665000000066f726967696e313030313031323031323032323035"
    "323036333030333032333033333034333035333036333037343032343035343036343037343038343039343130343131"
    "343132343133343134343135343136343137353032353034353035323033204e6f6e2d417574686f7269746174697665"
    "20496e666f726d6174696f6e323034204e6f20436f6e74656e74333031204d6f766564205065726d616e656e746c7934"
    "303020426164205265717565737434303120556e617574686f72697a656434303320466f7262696464656e343034204e"
    "6f7420466f756e6435303020496e7465726e616c20536572766572204572726f72353031204e6f7420496d706c656d65"
    "6e746564353033205365727669636520556e617661696c61626c654a616e20466562204d617220417072204d6179204a"
    "756e204a756c204175672053657074204f6374204e6f76204465632030303a30303a3030204d6f6e2c205475652c2057"
    "65642c205468752c204672692c205361742c2053756e2c20474d546368756e6b65642c746578742f68746d6c2c696d61"
    "67652f706e672c696d6167652f6a70672c696d6167652f6769662c6170706c69636174696f6e2f786d6c2c6170706c69"
    "636174696f6e2f7868746d6c2b786d6c2c746578742f706c61696e2c746578742f6a6176617363726970742c7075626c"
    "6963707269766174656d61782d6167653d677a69702c6465666c6174652c73646368636861727365743d7574662d3863"
    "6861727365743d69736f2d383835392d312c7574662d2c2a2c656e713d302e"
)
assert len(DICTIONARY) == 1423

SYN_STREAM, SYN_REPLY, PING = 1, 2, 6
FLAG_FIN = 0x01


def header_block(headers: dict[str, str]) -> bytes:
    out = struct.pack(">I", len(headers))
    for name, value in headers.items():
        out += struct.pack(">I", len(name)) + name.encode() + struct.pack(">I", len(value)) + value.encode()
    return out


def parse_header_block(block: bytes) -> dict[str, str]:
    (count,) = struct.unpack_from(">I", block, 0)
    at, out = 4, {}
    for _ in range(count):
        (n,) = struct.unpack_from(">I", block, at)
        name = block[at + 4 : at + 4 + n].decode()
        at += 4 + n
        (v,) = struct.unpack_from(">I", block, at)
        out[name] = block[at + 4 : at + 4 + v].decode()
        at += 4 + v
    return out


class SpdySession:
    """The server side of one SPDY session: SYN_STREAM answered with SYN_REPLY, PING echoed;
    `opened` and `received` say what a subclass does with streams and their DATA. `streams`
    records the headers of each stream the client opened."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer
        self.inflate = zlib.decompressobj(zdict=DICTIONARY)
        self.deflate = zlib.compressobj(zdict=DICTIONARY)
        self.streams: dict[int, dict[str, str]] = {}

    def control(self, kind: int, flags: int, payload: bytes) -> None:
        self.writer.write(struct.pack(">HHI", 0x8000 | 3, kind, (flags << 24) | len(payload)) + payload)

    def data(self, stream: int, flags: int, payload: bytes) -> None:
        self.writer.write(struct.pack(">II", stream & 0x7FFFFFFF, (flags << 24) | len(payload)) + payload)

    def opened(self, stream: int, headers: dict[str, str], fin: bool) -> None:
        """A stream the client opened (its SYN_REPLY is sent)."""

    def received(self, stream: int, payload: bytes, fin: bool) -> None:
        """DATA of a stream."""

    async def serve(self) -> None:
        while True:
            try:
                head = await self.reader.readexactly(8)
                first, second = struct.unpack(">II", head)
                flags, length = second >> 24, second & 0xFFFFFF
                payload = await self.reader.readexactly(length)
            except (asyncio.IncompleteReadError, ConnectionError):
                return
            if first & 0x80000000:
                kind = first & 0xFFFF
                if kind == SYN_STREAM:
                    (stream,) = struct.unpack_from(">I", payload, 0)
                    stream &= 0x7FFFFFFF
                    self.streams[stream] = parse_header_block(self.inflate.decompress(payload[10:]))
                    block = self.deflate.compress(header_block({})) + self.deflate.flush(zlib.Z_SYNC_FLUSH)
                    self.control(SYN_REPLY, 0, struct.pack(">I", stream) + block)
                    self.opened(stream, self.streams[stream], bool(flags & FLAG_FIN))
                elif kind == PING:
                    self.control(PING, 0, payload)
            else:
                self.received(first & 0x7FFFFFFF, payload, bool(flags & FLAG_FIN))
            await self.writer.drain()


class EchoPortForward(SpdySession):
    """A kubelet's port-forward: every data stream's bytes are echoed back."""

    def opened(self, stream: int, headers: dict[str, str], fin: bool) -> None:
        if fin:
            self.data(stream, FLAG_FIN, b"")

    def received(self, stream: int, payload: bytes, fin: bool) -> None:
        if payload and self.streams.get(stream, {}).get("streamtype") == "data":
            self.data(stream, 0, payload)
        if fin:
            self.data(stream, FLAG_FIN, b"")


class Exec(SpdySession):
    """A kubelet's exec over SPDY (v4.channel.k8s.io: one stream per stdin, stdout, stderr and
    error, the exit Status as JSON on the error stream), of a container that runs `echo ARGS`,
    `cat` (stdin to stdout) or `exit N`, like the WebSocket stand-in of the kubelet tests."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, command: list[str], *, stdin: bool) -> None:
        super().__init__(reader, writer)
        self.command = command
        self.expected = {"error", "stdout", "stderr"} | ({"stdin"} if stdin else set())
        self.by_type: dict[str, int] = {}
        self.stdin = b""

    def opened(self, stream: int, headers: dict[str, str], fin: bool) -> None:
        self.by_type[headers.get("streamtype", "")] = stream
        if set(self.by_type) >= self.expected and self.command[:1] != ["cat"]:
            self.run()

    def received(self, stream: int, payload: bytes, fin: bool) -> None:
        if stream == self.by_type.get("stdin"):
            self.stdin += payload
            if fin and self.command == ["cat"]:
                self.run()

    def run(self) -> None:
        status: dict[str, object] = {"metadata": {}, "status": "Success"}
        if self.command[:1] == ["echo"]:
            self.data(self.by_type["stdout"], 0, " ".join(self.command[1:]).encode() + b"\n")
        elif self.command == ["cat"]:
            self.data(self.by_type["stdout"], 0, self.stdin)
        elif self.command[:1] == ["exit"]:
            status = {"metadata": {}, "status": "Failure", "reason": "NonZeroExitCode", "message": "command terminated with non-zero exit code",
                      "details": {"causes": [{"reason": "ExitCode", "message": self.command[1]}]}}
        self.data(self.by_type["stdout"], FLAG_FIN, b"")
        self.data(self.by_type["stderr"], FLAG_FIN, b"")
        self.data(self.by_type["error"], FLAG_FIN, json.dumps(status).encode())
