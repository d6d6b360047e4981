"""HPACK (RFC 7541) for the HTTP/2 front: decoding the header blocks of requests, validated as
RFC 9113 §8.2 and §8.3 ask, and encoding the proxy's answers. Pure: no I/O, no event loop.

Owns: the decoder's dynamic table (one per connection), the decoded and checked literal fields
every connection's table refers to (shared by the process), the checks a request's header list
must pass before the pipeline sees it, and the encoded bytes of answer header fields that repeat
(shared by every connection of a front). Does not own: frames, streams or flow control
(`proxy.fronts.http2_protocol`).

Why a decoder of our own (the house rule prefers a library outside the core): `hpack.Decoder`
spent 18 us on a request whose seven fields were all indexed (client-go indexes every field it
sends, so a repeated request is a handful of one-byte references), and h2's checks of the
decoded list as much again: together a third of what the HTTP/2 front cost over the HTTP/1.1
one. Here a dynamic-table entry is decoded and checked once, when it is inserted, and an
indexed reference is a list lookup. Huffman-coded literals (new paths) are decoded by the
`hpack` library's own table (`hpack.huffman_table.decode_huffman`).

Answers are encoded statelessly: static-table name indexes and literals without indexing, no
Huffman coding, no dynamic table (RFC 7541 §6.2.2). A whole encoded field is cached for header
names whose values repeat (Content-Type, Cache-Control, the priority-and-fairness UIDs), so an
answer's header block is a few dictionary lookups and one join.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from hpack.exceptions import HPACKDecodingError
from hpack.huffman_table import decode_huffman
from hpack.table import HeaderTable

# What a decoded field is to a request (the last item of a `Field`).
REGULAR = 0  # an ordinary header field, valid
PSEUDO = 1  # one of the four request pseudo-header fields (RFC 9113 §8.3.1), valid
HOST = 2  # the Host header field (checked against :authority), valid
MALFORMED = 3  # anything a request must not carry: the request is malformed (RFC 9113 §8.1.1)
_TE = 4  # only while classifying a name: valid with the value "trailers" alone

# (name, value, size in bytes as RFC 7541 §4.1 counts it, kind), names and values as latin-1 str
Field = tuple[str, str, int, int]

# RFC 7541 §4.1: an entry's size is its name's and value's lengths plus 32 bytes
_ENTRY_OVERHEAD = 32
# bytes; SETTINGS_HEADER_TABLE_SIZE, RFC 7541's default; the front never announces another
DEFAULT_TABLE_SIZE = 4096
# literal fields every decoder (every connection of the process) shares, once decoded and
# checked: kubelets send the same User-Agent, Accept, Content-Type and :authority, so their
# dynamic tables hold references to one Field instead of copies (tracemalloc: ~3 KB of decoded
# strings and Field tuples per kubelet before). Filled first come, first kept, never evicted:
# the first clients' common fields are in it, and the unique ones (paths with a node's name)
# fill the rest; then a field is made per connection, as before. Bounded in count and in each
# field's size (RFC 7541 §4.1 bytes: a kubelet's longest, a pod watch's path with its field
# selector, is ~200), so what a client can leave in it is at most ~3 MiB per process.
_MAX_SHARED_FIELDS = 4096
_MAX_SHARED_FIELD_SIZE = 512
_shared_fields: dict[tuple[str, str], Field] = {}
# fields never shared: credentials stay in their own connection's table and go with it (the
# proxy keeps no client credential beyond the connection it came on: proxy.authn)
_PRIVATE = frozenset({"authorization", "proxy-authorization", "cookie"})
# RFC 9113 §8.2.2: connection-specific fields; TE only with "trailers"
_CONNECTION_SPECIFIC = frozenset({"connection", "proxy-connection", "keep-alive", "transfer-encoding", "upgrade"})
_REQUEST_PSEUDO = frozenset({":method", ":scheme", ":authority", ":path"})
# RFC 9113 §8.2.1: no 0x00-0x20, no upper case, no 0x7f-0xff, no colon (pseudo-headers aside)
_VALID_NAME = re.compile(r"[\x21-\x39\x3b-\x40\x5b-\x7e]+").fullmatch
# RFC 9113 §8.2.1: no NUL, CR or LF anywhere; no SP or HTAB first or last. A value that passes
# cannot split the HTTP/1.1 request the proxy sends a partition.
_INVALID_VALUE = re.compile(r"[\x00\r\n]|\A[ \t]|[ \t]\Z").search
# RFC 9110 §9.1: a method is a token
_TOKEN = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+").fullmatch


class CompressionError(ValueError):
    """A header block HPACK cannot decode: a connection error (COMPRESSION_ERROR)."""


class HeaderListTooLarge(ValueError):
    """A header list over the connection's SETTINGS_MAX_HEADER_LIST_SIZE."""


class MalformedRequest(ValueError):
    """A request whose header list RFC 9113 §8.1.1 calls malformed: a stream error."""


def _name_kind(name: str) -> int:
    if name.startswith(":"):
        return PSEUDO if name in _REQUEST_PSEUDO else MALFORMED
    if not _VALID_NAME(name) or name in _CONNECTION_SPECIFIC:
        return MALFORMED
    if name == "te":
        return _TE
    return HOST if name == "host" else REGULAR


def _field(name: str, name_kind: int, value: str) -> Field:
    kind = name_kind
    if value and _INVALID_VALUE(value):
        kind = MALFORMED
    elif kind == _TE:
        kind = REGULAR if value.lower() == "trailers" else MALFORMED
    return (name, value, len(name) + len(value) + _ENTRY_OVERHEAD, kind)


# index 0 is no entry (RFC 7541 §2.3.3: index 0 is an error)
_STATIC: tuple[Field, ...] = (("", "", 0, MALFORMED),) + tuple(
    _field(n.decode("latin-1"), _name_kind(n.decode("latin-1")), v.decode("latin-1")) for n, v in HeaderTable.STATIC_TABLE
)
_STATIC_LENGTH = len(_STATIC) - 1  # 61


def _continued_integer(block: bytes, i: int, value: int) -> tuple[int, int]:
    """The rest of an HPACK integer whose prefix was full (`value`): (integer, next offset).
    Raises IndexError on a truncated block, CompressionError past 2^28 (no field is that long)."""
    shift = 0
    while True:
        byte = block[i]
        i += 1
        value += (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, i
        shift += 7
        if shift > 21:
            raise CompressionError("an HPACK integer over 2^28")


class HeaderDecoder:
    """Decodes one connection's request header blocks, in order (RFC 7541 §3), with their
    dynamic table. Each field comes back classified (`REGULAR`, `PSEUDO`, `HOST`, `MALFORMED`);
    `request_head` makes a request of them."""

    __slots__ = ("_table", "_size", "_max_size", "_allowed_size", "max_list_size")

    def __init__(self, *, max_list_size: int, table_size: int = DEFAULT_TABLE_SIZE) -> None:
        self._table: list[Field] = []  # newest first: index 62 is _table[0]
        self._size = 0  # bytes
        self._max_size = table_size  # the encoder's current maximum (dynamic table size updates)
        self._allowed_size = table_size  # our SETTINGS_HEADER_TABLE_SIZE
        self.max_list_size = max_list_size  # bytes, RFC 7541 §4.1 sizes

    def decode(self, block: bytes) -> list[Field]:
        """The fields of a whole header block. Raises CompressionError (the connection cannot go
        on: its table may be out of step with the client's) or HeaderListTooLarge."""
        fields: list[Field] = []
        append = fields.append
        static, table = _STATIC, self._table
        size, limit = 0, self.max_list_size
        updates = 0
        i, end = 0, len(block)
        try:
            while i < end:
                first = block[i]
                if first & 0x80:  # indexed field (§6.1)
                    index = first & 0x7F
                    i += 1
                    if index == 0x7F:
                        index, i = _continued_integer(block, i, index)
                    if index > _STATIC_LENGTH:
                        field = table[index - _STATIC_LENGTH - 1]
                    elif index:
                        field = static[index]
                    else:
                        raise CompressionError("indexed field 0")
                elif first & 0x40:  # literal with incremental indexing (§6.2.1)
                    field, i = self._literal(block, i, 0x3F, share=True)
                    self._insert(field)
                elif first & 0x20:  # dynamic table size update (§6.3)
                    if fields or updates == 2:
                        raise CompressionError("a table size update after a field, or more than two")
                    updates += 1
                    new_size, i = block[i] & 0x1F, i + 1
                    if new_size == 0x1F:
                        new_size, i = _continued_integer(block, i, new_size)
                    if new_size > self._allowed_size:
                        raise CompressionError(f"a table size of {new_size} bytes, over the {self._allowed_size} allowed")
                    self._max_size = new_size
                    self._evict()
                    continue
                else:  # literal without indexing (§6.2.2) or never indexed (§6.2.3)
                    field, i = self._literal(block, i, 0x0F, share=False)
                size += field[2]
                if size > limit:
                    raise HeaderListTooLarge(f"a header list over {limit} bytes")
                append(field)
        except IndexError:
            raise CompressionError("a truncated header block, or an index past the table") from None
        return fields

    def _literal(self, block: bytes, i: int, mask: int, *, share: bool) -> tuple[Field, int]:
        """A literal field at `i`: (the field, the offset after it). `share`: it goes into the
        dynamic table, so the process's shared field is used, or made (never for a credential
        or a field over _MAX_SHARED_FIELD_SIZE)."""
        index = block[i] & mask
        i += 1
        if index == mask:
            index, i = _continued_integer(block, i, index)
        if index:
            if index > _STATIC_LENGTH:
                name = self._table[index - _STATIC_LENGTH - 1][0]
            else:
                name = _STATIC[index][0]
        else:
            name, i = self._string(block, i)
        value, i = self._string(block, i)
        if not share or name in _PRIVATE or len(name) + len(value) + _ENTRY_OVERHEAD > _MAX_SHARED_FIELD_SIZE:
            return _field(name, _name_kind(name), value), i
        key = (name, value)
        field = _shared_fields.get(key)
        if field is None:
            field = _field(name, _name_kind(name), value)
            if len(_shared_fields) < _MAX_SHARED_FIELDS:
                _shared_fields[key] = field
        return field, i

    @staticmethod
    def _string(block: bytes, i: int) -> tuple[str, int]:
        huffman = block[i] & 0x80
        length = block[i] & 0x7F
        i += 1
        if length == 0x7F:
            length, i = _continued_integer(block, i, length)
        stop = i + length
        if stop > len(block):
            raise CompressionError("a string past the end of its header block")
        raw = block[i:stop]
        if huffman:
            try:
                raw = decode_huffman(raw)
            except HPACKDecodingError as exc:
                raise CompressionError(str(exc)) from None
        return raw.decode("latin-1"), stop

    def _insert(self, field: Field) -> None:
        self._table.insert(0, field)
        self._size += field[2]
        self._evict()

    def _evict(self) -> None:
        while self._size > self._max_size:
            self._size -= self._table.pop()[2]


class RequestHead:
    """A request's pseudo-header fields and its other fields, as `request_head` found them."""

    __slots__ = ("method", "path", "authority", "headers")

    def __init__(self, method: str, path: str, authority: str | None, headers: list[tuple[str, str]]) -> None:
        self.method = method
        self.path = path
        self.authority = authority
        self.headers = headers


def request_head(fields: Iterable[Field]) -> RequestHead:
    """The request a decoded header list makes (RFC 9113 §8.3.1): pseudo-header fields first,
    each once, :method, :scheme and a non-empty :path (an ordinary CONNECT: neither of the last
    two), :authority or Host (the same value when both), every field valid. Raises
    MalformedRequest."""
    method = scheme = path = authority = host = None
    headers: list[tuple[str, str]] = []
    regular = False
    for name, value, _, kind in fields:
        if kind == REGULAR:
            headers.append((name, value))
            regular = True
        elif kind == PSEUDO:
            if regular:
                raise MalformedRequest(f"{name} after a regular header field")
            if name == ":method":
                if method is not None:
                    raise MalformedRequest("two :method fields")
                method = value
            elif name == ":path":
                if path is not None:
                    raise MalformedRequest("two :path fields")
                path = value
            elif name == ":scheme":
                if scheme is not None:
                    raise MalformedRequest("two :scheme fields")
                scheme = value
            else:
                if authority is not None:
                    raise MalformedRequest("two :authority fields")
                authority = value
        elif kind == HOST:
            if host is not None:
                raise MalformedRequest("two Host fields")
            host = value
            headers.append((name, value))
            regular = True
        else:
            raise MalformedRequest(f"a malformed or forbidden field {name!r}")
    if method is None or not _TOKEN(method):
        raise MalformedRequest("no valid :method")
    if method == "CONNECT":
        if scheme is not None or path is not None:
            raise MalformedRequest("CONNECT with :scheme or :path")
    elif scheme is None or not path:
        raise MalformedRequest("no :scheme or no :path")
    if authority is None and host is None:
        raise MalformedRequest("neither :authority nor Host")
    if authority is not None and host is not None and authority != host:
        raise MalformedRequest(":authority and Host differ")
    return RequestHead(method, path or "/", authority, headers)


def trailers_are_valid(fields: Iterable[Field]) -> bool:
    """Whether a trailer section is well-formed (RFC 9113 §8.1: no pseudo-header fields)."""
    return all(kind == REGULAR or kind == HOST for _, _, _, kind in fields)


# -- encoding answers ------------------------------------------------------------------------


def _integer(value: int, prefix_bits: int, first: int) -> bytes:
    """An HPACK integer (RFC 7541 §5.1) whose first byte carries `first` above its prefix."""
    limit = (1 << prefix_bits) - 1
    if value < limit:
        return bytes((first | value,))
    out = bytearray((first | limit,))
    value -= limit
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _literal_value(value: str) -> bytes:
    data = value.encode("latin-1")
    return _integer(len(data), 7, 0) + data


# Answer fields whose values differ from one answer to the next: encoded each time, not cached.
_VARYING = frozenset({"audit-id", "date", "content-length", "etag", "last-modified", "location", "x-request-id"})
# entries the field cache holds before it is emptied (the values of a few dozen names)
_MAX_CACHED_FIELDS = 4096
# names the name cache holds before it is emptied (what partitions answer: a few dozen)
_MAX_CACHED_ANSWER_NAMES = 1024
# RFC 9113 §8.2.2: never sent in HTTP/2, whatever a partition's answer carried
_NOT_SENT = frozenset({"connection", "keep-alive", "proxy-connection", "transfer-encoding", "upgrade", "te"})
# the first static-table index of each name (RFC 7541 Appendix A)
_STATIC_NAMES: dict[str, int] = {}
for _index, (_name, _) in enumerate(HeaderTable.STATIC_TABLE, start=1):
    _STATIC_NAMES.setdefault(_name.decode("latin-1"), _index)
# one byte each: the statuses the static table indexes whole
_STATIC_STATUSES = {int(v): i for i, (n, v) in enumerate(HeaderTable.STATIC_TABLE, start=1) if n == b":status"}


def _name_part(lower: str) -> bytes:
    """The start of a literal field without indexing (RFC 7541 §6.2.2) naming `lower`."""
    index = _STATIC_NAMES.get(lower)
    if index is not None:
        return _integer(index, 4, 0x00)
    return b"\x00" + _literal_value(lower)


class AnswerEncoder:
    """Encodes the header blocks of answers, statelessly (no dynamic table: the same bytes are
    right on every connection, so one encoder serves a whole front)."""

    __slots__ = ("_names", "_fields", "_statuses", "_length")

    def __init__(self) -> None:
        # header name as given -> (encoded name part or None when not sent, lower-case name, cacheable)
        self._names: dict[str, tuple[bytes | None, str, bool]] = {}
        self._fields: dict[tuple[str, str], bytes] = {}  # (lower-case name, value) -> whole field
        self._statuses: dict[int, bytes] = {}
        self._length = _name_part("content-length")

    def encode(self, status: int, headers: Iterable[tuple[str, str]], *, content_type: str | None = None,
               content_length: int | None = None) -> bytes:
        """The header block of an answer: `:status`, then `headers` (names lower-cased, fields
        that are connection-specific left out), then Content-Type when given, then
        Content-Length when given (which replaces any in `headers`). Values are latin-1."""
        status_field = self._statuses.get(status)
        if status_field is None:
            status_field = self._status(status)
        parts = [status_field]
        append = parts.append
        names, fields = self._names, self._fields
        for name, value in headers:
            entry = names.get(name)
            if entry is None:
                entry = self._name(name)
            prefix, lower, cacheable = entry
            if prefix is None or (content_length is not None and lower == "content-length"):
                continue
            if cacheable:
                field = fields.get((lower, value))
                if field is None:
                    field = self._cached_field(prefix, lower, value)
                append(field)
            else:
                append(prefix)
                append(_literal_value(value))
        if content_type is not None:
            append(fields.get(("content-type", content_type)) or self._cached_field(_name_part("content-type"), "content-type", content_type))
        if content_length is not None:
            append(self._length)
            append(_literal_value(str(content_length)))
        return b"".join(parts)

    def _status(self, status: int) -> bytes:
        index = _STATIC_STATUSES.get(status)
        if index is not None:
            field = _integer(index, 7, 0x80)
        else:
            field = _integer(_STATIC_NAMES[":status"], 4, 0x00) + _literal_value(str(status))
        self._statuses[status] = field
        return field

    def _name(self, name: str) -> tuple[bytes | None, str, bool]:
        lower = name.lower()
        entry = (None if lower in _NOT_SENT else _name_part(lower), lower, lower not in _VARYING)
        if len(self._names) >= _MAX_CACHED_ANSWER_NAMES:
            self._names.clear()
        self._names[name] = entry
        return entry

    def _cached_field(self, prefix: bytes, lower: str, value: str) -> bytes:
        field = prefix + _literal_value(value)
        if len(self._fields) >= _MAX_CACHED_FIELDS:
            self._fields.clear()
        self._fields[(lower, value)] = field
        return field
