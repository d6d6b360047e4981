"""Fixtures of the proxy's unit tests."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest


@pytest.fixture(autouse=True)
async def no_tasks_left_behind() -> AsyncIterator[None]:
    """Fail a test that leaves asyncio tasks running (kopf's conftest does the same): every task
    has an owner that cancels and awaits it."""
    before = set(asyncio.all_tasks())
    yield
    for _ in range(3):  # let tasks cancelled at the end of the test finish
        await asyncio.sleep(0)
    left = {t for t in asyncio.all_tasks() - before if not t.done() and t is not asyncio.current_task()}
    for task in left:
        task.cancel()
    assert not left, f"tasks left behind: {sorted(t.get_name() for t in left)}"
