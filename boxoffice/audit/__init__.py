"""The audit log of administration: who did what to which resource, when,
and how it ended, appended in the transaction that made the change.

- :class:`Auditor` runs one service's admin actions, each recorded in the
  ``admin_audit`` table with the caller (:func:`boxoffice.caller.current`),
  the RPC and its request as JSON, the resource before and after, and the
  outcome (``OK`` or the error's code, reason and message).
- The stores an action changes are built on the auditor's pool: inside the
  action their transactions join its transaction
  (:func:`boxoffice.db.joining`).
- :func:`migrations` creates the table, append-only for real: a trigger
  refuses UPDATE, DELETE and TRUNCATE. Each service that serves an admin API
  applies them under its own component name.
- :func:`entries` reads the log back.
"""

from __future__ import annotations

from boxoffice.audit._log import OK, AuditEntry, Auditor, Json, entries, message_json
from boxoffice.db import Migration, load_migrations


def migrations(service: str) -> list[Migration]:
    """The audit table's migrations as ``service`` applies them (component
    ``<service>-audit``; the statements are idempotent, so services that
    share a database each apply them)."""
    return load_migrations(f"{service}-audit", "boxoffice.audit")


__all__ = [
    "OK",
    "AuditEntry",
    "Auditor",
    "Json",
    "entries",
    "message_json",
    "migrations",
]
