"""MicroBatcher: how calls gather into batches, with a process function
the test holds open."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import pytest

from boxoffice import deadline
from boxoffice.batching import MicroBatcher
from boxoffice.errors import DeadlineExceeded


class Gate:
    """A process function whose batches wait until the test lets them go."""

    def __init__(self) -> None:
        self.batches: list[list[int]] = []
        self.release = asyncio.Event()

    async def process(self, items: list[int]) -> Sequence[int | BaseException]:
        self.batches.append(list(items))
        await self.release.wait()
        return [ValueError(f"bad {i}") if i < 0 else i * 10 for i in items]


async def settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


async def test_an_idle_batcher_sends_at_once_and_gathers_while_a_batch_is_out() -> None:
    gate = Gate()
    batcher: MicroBatcher[int, int] = MicroBatcher(gate.process, name="t", max_batch=10, max_in_flight=2)
    first = asyncio.create_task(batcher.submit(1))
    await settle()
    assert gate.batches == [[1]]
    rest = [asyncio.create_task(batcher.submit(i)) for i in range(2, 6)]
    await settle()
    assert gate.batches == [[1]]  # fewer than half a batch wait: no second batch yet
    gate.release.set()
    assert await first == 10
    assert [await t for t in rest] == [20, 30, 40, 50]
    assert gate.batches == [[1], [2, 3, 4, 5]]
    assert (batcher.batches_sent, batcher.items_sent) == (2, 5)


async def test_enough_waiting_calls_send_a_second_batch_while_one_is_out() -> None:
    gate = Gate()
    batcher: MicroBatcher[int, int] = MicroBatcher(gate.process, name="t", max_batch=4, max_in_flight=2)
    tasks = [asyncio.create_task(batcher.submit(1))]
    await settle()
    tasks += [asyncio.create_task(batcher.submit(i)) for i in range(2, 12)]
    await settle()
    # Half a batch (2) waiting sends the second of at most two batches.
    assert gate.batches == [[1], [2, 3, 4, 5]]
    gate.release.set()
    assert [await t for t in tasks] == [i * 10 for i in range(1, 12)]
    assert gate.batches == [[1], [2, 3, 4, 5], [6, 7, 8, 9], [10, 11]]


async def test_a_lingering_batch_goes_as_soon_as_enough_calls_wait() -> None:
    gate = Gate()
    gate.release.set()
    batcher: MicroBatcher[int, int] = MicroBatcher(
        gate.process, name="t", max_batch=4, max_in_flight=1, linger_seconds=3600
    )
    gate.release.clear()
    first = asyncio.create_task(batcher.submit(1))
    await settle()
    second = asyncio.create_task(batcher.submit(2))
    await settle()
    gate.release.set()
    assert await first == 10
    await settle()
    # One call waits, fewer than half a batch: its batch lingers.
    assert gate.batches == [[1]] and not second.done()
    third = asyncio.create_task(batcher.submit(3))
    assert [await second, await third] == [20, 30]
    assert gate.batches == [[1], [2, 3]]


async def test_each_item_gets_its_own_error_and_a_failing_batch_fails_its_items() -> None:
    gate = Gate()
    gate.release.set()
    batcher: MicroBatcher[int, int] = MicroBatcher(gate.process, name="t", max_batch=10, max_in_flight=1)
    answers = await asyncio.gather(*(batcher.submit(i) for i in (1, -2, 3)), return_exceptions=True)
    assert answers[0] == 10 and answers[2] == 30
    assert isinstance(answers[1], ValueError) and str(answers[1]) == "bad -2"

    async def broken(items: list[int]) -> Sequence[int | BaseException]:
        raise RuntimeError("down")

    failing: MicroBatcher[int, int] = MicroBatcher(broken, name="t", max_batch=10, max_in_flight=1)
    answers = await asyncio.gather(*(failing.submit(i) for i in (1, 2)), return_exceptions=True)
    assert all(isinstance(a, RuntimeError) for a in answers)


async def test_a_caller_that_gave_up_is_left_out_of_its_batch() -> None:
    gate = Gate()
    batcher: MicroBatcher[int, int] = MicroBatcher(gate.process, name="t", max_batch=10, max_in_flight=1)
    first = asyncio.create_task(batcher.submit(1))
    await settle()
    gone = asyncio.create_task(batcher.submit(2))
    kept = asyncio.create_task(batcher.submit(3))
    await settle()
    gone.cancel()
    await settle()
    gate.release.set()
    assert await first == 10 and await kept == 30
    assert gate.batches == [[1], [3]]


async def test_a_caller_waits_no_longer_than_its_deadline() -> None:
    gate = Gate()
    batcher: MicroBatcher[int, int] = MicroBatcher(gate.process, name="t", max_batch=10, max_in_flight=1)
    with deadline.scope(0.05), pytest.raises(DeadlineExceeded):
        await batcher.submit(1)
    gate.release.set()
    await batcher.stop(1.0)


async def test_stop_sends_a_lingering_batch_and_waits_for_it() -> None:
    gate = Gate()
    batcher: MicroBatcher[int, int] = MicroBatcher(
        gate.process, name="t", max_batch=4, max_in_flight=1, linger_seconds=3600
    )
    first = asyncio.create_task(batcher.submit(1))
    await settle()
    second = asyncio.create_task(batcher.submit(2))
    gate.release.set()
    assert await first == 10
    await settle()
    assert gate.batches == [[1]] and not second.done()
    await batcher.stop(5.0)
    assert second.done() and second.result() == 20
