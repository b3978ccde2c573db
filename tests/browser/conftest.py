"""Fixtures of the browser tests: one headless Chromium and one mesh with its
edge, shared by every browser test and stopped when the browser tests end
(the mesh's background roles -- admitter, relay, reconciler -- work on the
suite's shared database and Redis, so they must not outlive this package)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from playwright.async_api import Browser, async_playwright

from tests.browser.harness import CHROMIUM_FLAGS, Mesh, chromium_path, mesh_with_edge
from tests.support import Stores


@pytest.fixture(scope="package")
async def browser() -> AsyncIterator[Browser]:
    async with async_playwright() as playwright:
        chromium = await playwright.chromium.launch(
            executable_path=chromium_path(), headless=True, args=list(CHROMIUM_FLAGS)
        )
        try:
            yield chromium
        finally:
            await chromium.close()


@pytest.fixture(scope="package")
async def mesh(stores: Stores) -> AsyncIterator[Mesh]:
    async with mesh_with_edge(stores, prefix="browser") as mesh:
        yield mesh
