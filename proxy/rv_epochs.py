"""The shared epoch table of vector-form proxy resourceVersions (docs/resource-versions.md).

Owns one `RVCodec` per RV space (the tenant partitions, the resource partitions) and keeps
their table in step with the copy every replica shares: a ConfigMap in the system partition
(`resource_versions.table_namespace/table_name`, key `epochs`). Every `refresh_seconds` a
replica reads the table and each partition's current native RV (a `limit=1` namespace list,
whose RV is the partition's etcd revision); when the newest epoch of a space has used half its
range (`routing.rv.next_epoch`), it writes the table with one more epoch, guarded by the
ConfigMap's resourceVersion: of replicas racing, one wins, the others re-read and find the
headroom restored. No leader election is needed: optimistic concurrency on the one object
already gives every epoch exactly one writer.

What it does not own: encoding and decoding (routing.rv), deciding what to answer when an RV
cannot be used (the request handlers).
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

from cachetools import TTLCache

from config.models import PartitionRole, PartitionState, ProxyConfig
from proxy.clients.errors import APIConflict, APINotFound, UpstreamError
from proxy.clients.partition import PartitionClient
from routing import rv as rvcodec

log = logging.getLogger("partition_proxy.rv_epochs")

_DATA_KEY = "epochs"
# seconds; the least time between two on-demand refreshes (an unknown newer epoch in a client's
# RV, or a vector no epoch fits): a burst of such requests costs the partition one read.
_MIN_ON_DEMAND_INTERVAL = 0.5
# attempts at writing the table before waiting for the next round (lost races re-read it).
_WRITE_ATTEMPTS = 3
# How long (seconds) the vector given for a partition's answer at one native RV is given again
# for another answer at that RV: the pages of one paged list (each has the snapshot's RV, and
# kube-apiserver answers every page with the first page's resourceVersion: the e2e "API
# chunking" spec checks it). Long enough for a client to page through a large list (client-go
# pages of 500 take well under a second each); short, because a partition that stays at one RV
# would otherwise keep the others' positions of long ago (a union started from them replays
# more of the others' events). The entries: at most this many answers' RVs (an entry ~200 bytes).
_POSITION_MEMORY_SECONDS = 60.0
_POSITION_MEMORY_ENTRIES = 4096


class TableUnavailable(Exception):
    """The system partition did not answer a read or write of the table."""


class ResourceVersions:
    """The codecs of the proxy's RV spaces and the loop that keeps their table shared."""

    def __init__(self, config: ProxyConfig) -> None:
        self._config = config.resource_versions
        self._clients: dict[str, PartitionClient] = {}
        self.codecs: dict[tuple[str, ...], rvcodec.RVCodec] = {}
        self.spaces: list[tuple[str, ...]] = []
        self._every_codec: list[rvcodec.RVCodec] = []  # also those of earlier partition sets, still held by open watches
        self.table = rvcodec.EpochTable()
        self.ready = asyncio.Event()
        self._wake = asyncio.Event()
        self._last_sync = 0.0
        self._current: dict[str, int] = {}
        # (space, slot, native) -> the vector position_vector gave for it (_POSITION_MEMORY_SECONDS)
        self._given: TTLCache[tuple[tuple[str, ...], int, int], tuple[int, ...]] = TTLCache(
            _POSITION_MEMORY_ENTRIES, _POSITION_MEMORY_SECONDS, timer=time.monotonic)
        self.read_at = 0.0  # time.monotonic() of the last successful read of the table (0: never)
        self.epochs_published = 0
        self.configure(config)

    def configure(self, config: ProxyConfig) -> None:
        """Take the RV spaces of `config` (at start-up, and when the partition set changes): a
        codec per role over every partition of it, and one over every partition of both roles,
        retired ones marked. A space met before keeps its codec object unless its retired set
        changed. Raises ValueError when two partition
        names share an object-form id (a 32-bit hash: practically never)."""
        self._system_name = config.system_partition
        spaces = []
        every = (tuple(p.name for p in config.partitions), frozenset(p.name for p in config.partitions if not p.live))
        for space, retired in [
            *((config.names(role), frozenset(config.names(role, PartitionState.RETIRED))) for role in (PartitionRole.TENANT, PartitionRole.RESOURCE)),
            every,  # unions over both roles (leases in every namespace), configuration order
        ]:
            codec = self.codecs.get(space)
            if codec is None or codec.retired != retired:
                codec = rvcodec.RVCodec(space, self.table, retired=retired)
                self.codecs[space] = codec
                self._every_codec.append(codec)
            spaces.append(space)
        self.spaces = spaces

    def codec_extending(self, space: tuple[str, ...]) -> rvcodec.RVCodec | None:
        """The codec of the current space that starts with `space` (the same role after a
        partition-set change: slots are append-only), None if none does. The shortest such
        space: a role's space is also the start of the space of both roles."""
        longer = [current for current in self.spaces if current[: len(space)] == space]
        return self.codecs[min(longer, key=len)] if longer else None

    def covers(self) -> bool:
        """Whether the table has an epoch of every current space (a new space has none until
        the next sync publishes one)."""
        return all(self.table.newest(space) is not None for space in self.spaces)

    def bind(self, clients: dict[str, PartitionClient]) -> None:
        """The partitions' clients, once they are open (before `run`)."""
        self._clients = clients

    @property
    def _system(self) -> PartitionClient:
        return self._clients[self._system_name]

    def codec(self, space: tuple[str, ...]) -> rvcodec.RVCodec:
        """The codec of an RV space (a route's `rv_space`). Raises KeyError for an unknown one."""
        return self.codecs[space]

    def slot_bits(self, space: tuple[str, ...]) -> int:
        return self._config.slot_bits or rvcodec.natural_slot_bits(len(space))

    async def decode(self, codec: rvcodec.RVCodec, rv: str) -> tuple[int, ...]:
        """codec.decode, re-reading the table once when the RV names an epoch newer than this
        replica knows (another replica published it moments ago). Raises RVError."""
        try:
            return codec.decode(rv)
        except rvcodec.RVTooOld as exc:
            if exc.epoch <= codec.table.newest_number:
                raise
            await self.sync_now()
            return codec.decode(rv)

    async def start_vector(self, codec: rvcodec.RVCodec, client_rv: str) -> tuple[int, ...] | None:
        """The vector a client's RV names for a union list or watch: None for ""/"0"/non-numeric.
        A 0 field of a vector-form RV (a partition its epoch did not have yet, or one that joined
        while the client watched) reads "nothing seen": the union starts that partition from its
        beginning. An object-form RV (an object's, or an answer of one partition) names a
        position in its own partition only: the others start from `position_vector`'s, as on
        one kube-apiserver every resourceVersion is a position of the whole cluster. Raises
        RVError."""
        if not client_rv.isdigit() or client_rv == "0":
            return None
        vector = await self.decode(codec, client_rv)
        if not codec.is_vector_form(client_rv) and not codec.is_complete(vector):
            slot = next(i for i, native in enumerate(vector) if native)
            vector = self.position_vector(codec, slot, vector[slot])
        return vector

    def position_vector(self, codec: rvcodec.RVCodec, slot: int, native: int) -> tuple[int, ...]:
        """The position of an answer partition `slot` gave at its native RV `native`, in every
        partition of `codec`'s space: `native` in its own, and in each other the position this
        replica last read of it (the table's refresh reads every partition's current RV: at most
        `refresh_seconds` old, so a union started from it may also see the other partitions'
        events of those seconds, never miss one); 0 ("nothing seen") for one not read yet. The
        same (space, slot, native) gets the same vector for _POSITION_MEMORY_SECONDS, so every
        page of a paged list answers the first page's resourceVersion, as kube-apiserver does."""
        key = (codec.space, slot, native)
        given = self._given.get(key)
        if given is not None:
            return given
        vector = [self._position(partition, self.table) for partition in codec.space]
        vector[slot] = native
        self._given[key] = result = tuple(vector)
        return result

    async def native_for(self, codec: rvcodec.RVCodec, rv: str, slot: int) -> str | None:
        """codec.native_for, with the same re-read as `decode`. Raises RVError."""
        try:
            return codec.native_for(rv, slot)
        except rvcodec.RVTooOld as exc:
            if exc.epoch <= codec.table.newest_number:
                raise
            await self.sync_now()
            return codec.native_for(rv, slot)

    def request_sync(self) -> None:
        """Ask the loop for a sync now (an RV of an epoch this replica does not know yet, or a
        vector no epoch fits). Plain def: callable from anywhere on the loop."""
        self._wake.set()

    async def sync_now(self, *, timeout: float = 2.0) -> None:
        """Re-read the table at once (at most every 0.5 s), waiting up to `timeout` seconds."""
        if time.monotonic() - self._last_sync < _MIN_ON_DEMAND_INTERVAL:
            return
        try:
            await asyncio.wait_for(self.sync(), timeout)
        except (TableUnavailable, asyncio.TimeoutError) as exc:
            log.warning("resourceVersion table: on-demand sync failed: %s", exc)

    async def run(self) -> None:
        """Keep the table in step until cancelled: a sync every refresh_seconds (or when asked)."""
        backoff = 0.5
        while True:
            try:
                await self.sync()
                backoff = 0.5
                delay = self._config.refresh_seconds
            except TableUnavailable as exc:
                log.warning("resourceVersion table: %s; retrying in %.1f s", exc, backoff)
                delay, backoff = backoff, min(backoff * 2, self._config.refresh_seconds)
            self._wake.clear()
            try:
                await asyncio.wait_for(self._wake.wait(), delay)
            except asyncio.TimeoutError:
                pass

    async def sync(self) -> None:
        """Read the table, publish epochs the spaces need, install the result. Raises
        TableUnavailable."""
        self._last_sync = time.monotonic()
        await self._probe()
        for _ in range(_WRITE_ATTEMPTS):
            table, version = await self._read()
            self.read_at = time.monotonic()
            updated = table
            for space in self.spaces:
                current = [self._position(p, table) for p in space]
                if not all(current):
                    continue  # a partition's position is not known yet: decide next round
                updated = rvcodec.catch_up(
                    updated, space, current, slot_bits=self.slot_bits(space), retain=self._config.retain_epochs
                )
            if updated is table or await self._write(updated, version):
                if updated is not table:
                    self.epochs_published += 1
                    log.info("resourceVersion table: published epoch %d", updated.newest_number)
                self._install(updated)
                return
        # Lost every race: install what was read; the next round tries again.
        self._install(table)

    def _position(self, partition: str, table: rvcodec.EpochTable) -> int:
        """A partition's last known native RV; for one that is not probed (retired) and not
        seen by this process, the highest base an epoch gives it (its field never moves again)."""
        known = self._current.get(partition, 0)
        if known or partition in self._clients:
            return known
        bases = [b for e in table.epochs for p, b in zip(e.partitions, e.base) if p == partition]
        return max(bases, default=0) or 1

    def _install(self, table: rvcodec.EpochTable) -> None:
        self.table = table
        for codec in self._every_codec:
            codec.set_table(table)
        if self.covers():
            self.ready.set()

    # -- I/O -----------------------------------------------------------------------------------

    def _path(self, name: bool = True) -> str:
        base = f"/api/v1/namespaces/{self._config.table_namespace}/configmaps"
        return f"{base}/{self._config.table_name}" if name else base

    async def _probe(self) -> None:
        """Each partition's current native RV (the list RV of a one-item namespace list)."""

        async def one(name: str, client: PartitionClient) -> None:
            try:
                doc = await client.get_json("/api/v1/namespaces", "limit=1")
            except (UpstreamError, ValueError):
                return  # a partition that is down keeps its last known position
            rv = (doc.get("metadata") or {}).get("resourceVersion", "") if isinstance(doc, dict) else ""
            if isinstance(rv, str) and rv.isdigit():
                self._current[name] = max(self._current.get(name, 0), int(rv))

        await asyncio.gather(*(one(n, c) for n, c in self._clients.items()))

    async def _read(self) -> tuple[rvcodec.EpochTable, str]:
        """The stored table and the ConfigMap's resourceVersion ("" when it does not exist)."""
        try:
            doc: Any = await self._system.get_json(self._path())
        except APINotFound:
            return rvcodec.EpochTable(), ""
        except (UpstreamError, ValueError) as exc:
            raise TableUnavailable(f"reading the table failed: {exc}") from None
        data = doc.get("data") or {}
        version = (doc.get("metadata") or {}).get("resourceVersion", "")
        try:
            return rvcodec.table_from_json(data.get(_DATA_KEY, '{"version":1,"epochs":[]}')), version
        except ValueError as exc:
            raise TableUnavailable(str(exc)) from None

    async def _write(self, table: rvcodec.EpochTable, version: str) -> bool:
        """Create or update (guarded by `version`) the table. False when another replica
        wrote first. Raises TableUnavailable."""
        meta: dict[str, str] = {"name": self._config.table_name, "namespace": self._config.table_namespace}
        if version:
            meta["resourceVersion"] = version
        doc = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": {_DATA_KEY: rvcodec.table_to_json(table)}}
        method, path = ("PUT", self._path()) if version else ("POST", self._path(name=False))
        try:
            await self._system.send_json(method, path, doc)
        except APIConflict:
            return False  # Conflict or AlreadyExists: another replica wrote first
        except (UpstreamError, ValueError) as exc:
            raise TableUnavailable(f"writing the table failed: {exc}") from None
        return True

    def debug(self) -> dict[str, object]:
        """What /debug/resource-versions shows."""
        return {
            "ready": self.ready.is_set(),
            "newestEpoch": self.table.newest_number,
            "epochs": len(self.table.epochs),
            "published": self.epochs_published,
            "current": dict(self._current),
            "spaces": {
                ",".join(space): (lambda e: {"epoch": e.number, "slotBits": e.slot_bits, "base": list(e.base)} if e else None)(
                    self.table.newest(space)
                )
                for space in self.spaces
            },
        }
