"""The queue's ports on real stores: ``RedisQueueStore`` (the live waiting
room, ``redis_queue_store``), ``PgWaitingRoomRepository`` (the durable
configurations, ``pg_waiting_rooms``), ``PgDrawRepository`` (the pre-queue
draws, ``pg_draws``), ``RedisBookingHealth`` (what booking publishes
about its holds, ``booking_health``) and ``RedisBookingStock`` (whether
events are sold out, ``booking_stock``)."""

from queue_svc.adapters.booking_health import RedisBookingHealth
from queue_svc.adapters.booking_stock import RedisBookingStock
from queue_svc.adapters.pg_draws import PgDrawRepository
from queue_svc.adapters.pg_waiting_rooms import PgWaitingRoomRepository
from queue_svc.adapters.redis_queue_store import EventKeys, RedisQueueStore

__all__ = [
    "EventKeys",
    "PgDrawRepository",
    "PgWaitingRoomRepository",
    "RedisBookingHealth",
    "RedisBookingStock",
    "RedisQueueStore",
]
