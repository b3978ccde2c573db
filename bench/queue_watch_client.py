"""A client process holding many server streams, for bench/queue_streams.py.

Run by the benchmark: ``python -m bench.queue_watch_client <address> <kind>
<event_id> <first> <count>`` where kind is ``echo`` (bench.Echo/Watch) or
``queue`` (WatchQueuePosition of fans fan-<first> .. fan-<first+count-1>).

It opens every stream at once and reads each one's first message, then
prints ``OPEN <ok> <failed> <codes>``; then waits for one more message on
every stream and prints ``DONE <first_ts> <last_ts> <received>`` (monotonic
clock, comparable between processes of one machine); then exits on EOF of
its stdin.
"""

from __future__ import annotations

import asyncio
import collections
import sys
import time
from typing import Any

import grpc

from bench.common import channel as channel_as
from boxoffice.caller import CUSTOMER_METADATA_KEY
from gen.boxoffice.queue.v1 import queue_service_pb2 as pb
from gen.boxoffice.queue.v1 import queue_service_pb2_grpc as pb_grpc


def _identity(data: bytes) -> bytes:
    return data


async def _main(address: str, kind: str, event_id: int, first: int, count: int) -> None:
    channel = grpc.aio.insecure_channel(address) if kind == "echo" else channel_as(address)
    if kind == "echo":
        watch = channel.unary_stream("/bench.Echo/Watch", request_serializer=_identity, response_deserializer=_identity)
        calls: list[Any] = [watch(b"") for _ in range(count)]
    else:
        stub: Any = pb_grpc.QueueServiceStub(channel)
        calls = [
            # As the edge calls it: the fan asserted in the metadata.
            stub.WatchQueuePosition(
                pb.WatchQueuePositionRequest(event_id=event_id, customer_id=f"fan-{i}"),
                metadata=((CUSTOMER_METADATA_KEY, f"fan-{i}"),),
            )
            for i in range(first, first + count)
        ]
    failures: collections.Counter[str] = collections.Counter()

    async def opened(call: Any) -> bool:
        try:
            message = await call.read()
        except grpc.aio.AioRpcError as err:
            failures[err.code().name] += 1
            return False
        if message is grpc.aio.EOF:
            failures["EOF"] += 1
            return False
        return True

    ok = sum(await asyncio.gather(*(opened(call) for call in calls)))
    codes = ",".join(f"{code}:{n}" for code, n in failures.items()) or "-"
    print(f"OPEN {ok} {count - ok} {codes}", flush=True)

    stamps: list[float] = []

    async def updated(call: Any) -> None:
        try:
            message = await call.read()
        except grpc.aio.AioRpcError:
            return
        if message is not grpc.aio.EOF:
            stamps.append(time.monotonic())

    await asyncio.gather(*(updated(call) for call in calls))
    first_ts = min(stamps) if stamps else 0.0
    last_ts = max(stamps) if stamps else 0.0
    print(f"DONE {first_ts:.6f} {last_ts:.6f} {len(stamps)}", flush=True)
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)
    for call in calls:
        call.cancel()
    await channel.close()


if __name__ == "__main__":
    address, kind, event_id, first, count = sys.argv[1:6]
    asyncio.run(_main(address, kind, int(event_id), int(first), int(count)))
