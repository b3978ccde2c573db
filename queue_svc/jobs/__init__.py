"""The queue's background roles: the leader-elected ``Admitter``, the
``DrawRecorder`` that copies and seals the pre-queue draws, and the
``ProgressHub`` that follows each watched event's progress for a server's
streams."""

from queue_svc.jobs.admitter import Admitter
from queue_svc.jobs.draws import DrawRecorder
from queue_svc.jobs.progress import EventFeed, ProgressHub

__all__ = ["Admitter", "DrawRecorder", "EventFeed", "ProgressHub"]
