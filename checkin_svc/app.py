"""The check-in service's composition root.

CheckInService and its process (``boxoffice checkin``) are not composed yet:
this package holds the door's rules (:mod:`checkin_svc.handler`) and the
check-ins' store and schema, which the tests apply with the other services'.
"""

from __future__ import annotations

from boxoffice.db import Migration, load_migrations

COMPONENT = "checkin"


def migrations() -> list[Migration]:
    return load_migrations(COMPONENT, "checkin_svc")
