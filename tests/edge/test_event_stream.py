"""The SSE response closes its events however the response ends."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, MutableMapping
from typing import Any

import pytest

from edge_svc.endpoints.sse import EventStream


async def test_a_fan_gone_while_an_event_is_sent_closes_the_events_in_the_same_task() -> None:
    tasks: list[asyncio.Task[Any] | None] = []

    async def events() -> AsyncIterator[str]:
        try:
            while True:
                yield "data: {}\n\n"
        finally:
            tasks.append(asyncio.current_task())

    sent: list[MutableMapping[str, Any]] = []

    async def send(message: MutableMapping[str, Any]) -> None:
        sent.append(message)
        if len(sent) == 3:  # the head, one event, then the fan is gone
            raise OSError("connection reset")

    response = EventStream(events(), media_type="text/event-stream")
    with pytest.raises(OSError):
        await response.stream_response(send)
    assert tasks == [asyncio.current_task()]
    assert [m["type"] for m in sent] == ["http.response.start", "http.response.body", "http.response.body"]
