"""Consuming an outbox event stream as a member of a Redis consumer group:
at-least-once delivery to an idempotent handler, acknowledged after the
handler's work commits, entries of dead consumers claimed.

Public face: :class:`StreamConsumer`, :class:`StreamEntry`,
:class:`EntryHandler`, :class:`ConsumerHooks`, :class:`ConsumerMetrics`,
:func:`consumer_name`.
"""

from boxoffice.streams._consumer import ConsumerHooks, EntryHandler, StreamConsumer, StreamEntry, consumer_name
from boxoffice.streams._metrics import ConsumerMetrics

__all__ = ["ConsumerHooks", "ConsumerMetrics", "EntryHandler", "StreamConsumer", "StreamEntry", "consumer_name"]
