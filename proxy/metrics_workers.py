"""`/metrics` of a replica with several workers (`serve --workers N`): every worker answers its own
samples on a Unix socket in the workers' metrics directory, and the worker that takes a scrape
asks every other one and merges their samples into its own (`proxy.metrics` says how each kind
merges). Nothing is shared between workers until a scrape asks, so recording a request costs
no cross-process write.

Wire format on the socket: the asking worker connects; the answering one writes one JSON array
of families `[name, type, documentation, [[sample name, {label: value}, value], ...]]` and closes.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import orjson
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

from proxy.metrics import GAUGE_MAX, GAUGE_MIN, Metrics

log = logging.getLogger("partition_proxy.metrics")

# seconds a scrape waits for another worker's samples; a worker stuck longer is left out of
# that scrape (Prometheus' own scrape timeout is 10 s by default).
ASK_TIMEOUT_SECONDS = 1.0
_SOCKET_GLOB = "worker-*.sock"

Family = list[Any]  # [name, type, documentation, [[sample name, labels, value], ...]]


def socket_path(directory: str, pid: int | None = None) -> Path:
    """The socket in `directory` of the worker with process id `pid` (None: this one)."""
    return Path(directory) / f"worker-{os.getpid() if pid is None else pid}.sock"


def families(metrics: Metrics, caches: Sequence[Any]) -> list[Family]:
    """This worker's samples, its process-read gauges refreshed first."""
    metrics.refresh(caches)
    return [[m.name, m.type, m.documentation, [[s.name, s.labels, s.value] for s in m.samples]] for m in metrics.registry.collect()]


async def serve(metrics: Metrics, caches: Callable[[], Sequence[Any]], directory: str) -> asyncio.Server:
    """Answer other workers' questions on this worker's socket until the server is closed."""
    path = socket_path(directory)
    with contextlib.suppress(FileNotFoundError):
        path.unlink()

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            writer.write(orjson.dumps(families(metrics, caches())))
            await writer.drain()
        except ConnectionError:
            pass
        finally:
            writer.close()

    return await asyncio.start_unix_server(answer, path=str(path))


async def _ask(path: Path) -> list[Family] | None:
    try:
        async with asyncio.timeout(ASK_TIMEOUT_SECONDS):
            reader, writer = await asyncio.open_unix_connection(str(path))
            try:
                data = await reader.read()
            finally:
                writer.close()
        return orjson.loads(data)  # type: ignore[no-any-return]
    except (OSError, TimeoutError, orjson.JSONDecodeError) as exc:
        log.debug("metrics of %s left out of this scrape: %r", path.name, exc)
        return None


async def exposition(metrics: Metrics, caches: Sequence[Any], directory: str) -> bytes:
    """The Prometheus text of every worker: this one's samples merged with the others'."""
    own = socket_path(directory)
    others = [p for p in Path(directory).glob(_SOCKET_GLOB) if p != own]
    answers = await asyncio.gather(*(_ask(p) for p in others))
    merged = merge([families(metrics, caches), *(a for a in answers if a is not None)])
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Fixed(merged))
    return generate_latest(registry)


def merge(workers: Sequence[list[Family]]) -> list[Metric]:
    """One family per name, its samples combined over `workers`: summed, except the gauges of
    GAUGE_MAX (the largest) and GAUGE_MIN (the smallest) and counters' `_created` samples (the
    earliest)."""
    out: dict[str, tuple[Metric, dict[tuple[str, tuple[tuple[str, str], ...]], float]]] = {}
    for worker in workers:
        for name, type_, documentation, samples in worker:
            if name not in out:
                out[name] = (Metric(name, documentation, type_), {})
            values = out[name][1]
            highest = type_ == "gauge" and name in GAUGE_MAX
            lowest = type_ == "gauge" and name in GAUGE_MIN
            for sample_name, labels, value in samples:
                key = (sample_name, tuple(sorted(labels.items())))
                if key not in values:
                    values[key] = value
                elif highest:
                    values[key] = max(values[key], value)
                elif lowest:
                    values[key] = min(values[key], value)
                elif sample_name.endswith("_created"):
                    values[key] = min(values[key], value)
                else:
                    values[key] += value
    merged = []
    for metric, values in out.values():
        for (sample_name, labels), value in values.items():
            metric.add_sample(sample_name, dict(labels), value)
        merged.append(metric)
    return merged


class _Fixed(Collector):
    """A collector of families already made."""

    def __init__(self, metrics: list[Metric]) -> None:
        self._metrics = metrics

    def collect(self) -> Iterator[Metric]:
        return iter(self._metrics)
