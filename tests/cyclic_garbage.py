"""`CyclicGarbage`: what a block of a test leaves for the cycle collector. The proxy freezes
the survivors of full collections (proxy.loop_health), so cyclic garbage waits up to
FROZEN_SWEEP_SECONDS; tests of per-request and per-connection objects check that they leave
none."""

from __future__ import annotations

import gc


class CyclicGarbage:
    """The objects only the cycle collector could free, made while the block ran (gc.DEBUG_SAVEALL
    keeps them in gc.garbage), by type name in `types` after the block."""

    def __enter__(self) -> CyclicGarbage:
        gc.collect()
        gc.set_debug(gc.DEBUG_SAVEALL)
        self.types: set[str] = set()
        return self

    def __exit__(self, *exc: object) -> None:
        gc.collect()
        self.types = {type(o).__name__ for o in gc.garbage}
        gc.garbage.clear()
        gc.set_debug(0)
