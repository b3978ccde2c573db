"""A draw's public proof, as both of the queue's draws publish it (the
pre-queue's and the verified-fan draw's): the commitment always; once the
draw is sealed, the seed and one page of its entries in the draw's order."""

from __future__ import annotations

import dataclasses

from queue_svc.model import DrawRecord, PreQueueProof, ProofCursor, RankedEntry
from queue_svc.ports import DrawRepository


async def published(
    draws: DrawRepository,
    record: DrawRecord,
    *,
    opens_at_ms: int,
    page_size: int,
    after: ProofCursor | None,
    revealed: bool = True,
) -> PreQueueProof:
    """The proof of ``record``'s draw (``opens_at_ms``: when it is sealed);
    its entries only when it is sealed and ``revealed``."""
    secrets = record.secrets
    proof = PreQueueProof(
        event_id=secrets.event_id,
        algorithm=secrets.algorithm,
        commitment=secrets.commitment,
        committed_at_ms=record.committed_at_ms,
        opens_at_ms=opens_at_ms,
    )
    if record.sealed_at_ms is None or not revealed:
        return proof
    entries = await draws.entries(
        secrets.event_id, after=None if after is None else (after.score, after.pseudonym), limit=page_size + 1
    )
    first = 1 if after is None else after.rank + 1
    page = tuple(RankedEntry(first + i, e.pseudonym, e.score) for i, e in enumerate(entries[:page_size]))
    next_page = None
    if len(entries) > page_size and page:
        last = page[-1]
        next_page = ProofCursor(last.rank, last.score, last.pseudonym)
    return dataclasses.replace(
        proof,
        seed=secrets.seed,
        revealed_at_ms=record.sealed_at_ms,
        participant_count=record.participant_count,
        participants=page,
        next_page=next_page,
    )
