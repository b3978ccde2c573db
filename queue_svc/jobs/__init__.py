"""The queue's background roles: the leader-elected ``Admitter`` and the
``ProgressHub`` that follows each watched event's progress for a server's
streams."""

from queue_svc.jobs.admitter import Admitter
from queue_svc.jobs.progress import EventFeed, ProgressHub

__all__ = ["Admitter", "EventFeed", "ProgressHub"]
