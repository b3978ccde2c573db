"""The queue's ports on real stores: ``RedisQueueStore`` (the live waiting
room, ``redis_queue_store``), ``PgWaitingRoomRepository`` (the durable
configurations, ``pg_waiting_rooms``) and ``RedisBookingHealth`` (what
booking publishes about its holds, ``booking_health``)."""

from queue_svc.adapters.booking_health import RedisBookingHealth
from queue_svc.adapters.pg_waiting_rooms import PgWaitingRoomRepository
from queue_svc.adapters.redis_queue_store import EventKeys, RedisQueueStore

__all__ = ["EventKeys", "PgWaitingRoomRepository", "RedisBookingHealth", "RedisQueueStore"]
