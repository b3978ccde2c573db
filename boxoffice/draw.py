"""Verifiable draws: an order of fans that anyone can recompute from public
data, and that nobody, the operator included, could steer once fans began
to arrive.

This module is the whole algorithm. It is pure (no I/O, no clock, no
randomness) so that the queue service, which places fans, and
``boxoffice verify-draw``, which checks a published order, run the same
code, and so that anyone can re-implement it from this text alone.

Commit, then reveal
-------------------

Each draw has a secret *seed* of 32 bytes, drawn from a CSPRNG when the
draw is created (a waiting room's pre-queue: when the waiting room is
created, before anyone can join it). From then on the *commitment*
``SHA-256(seed)`` is public, as 64 lowercase hex digits. The seed itself is
revealed only once the draw is closed (the pre-queue: at opening, when no
fan can be placed in it any more). Anyone who saved the commitment before
then checks that ``SHA-256(revealed seed)`` equals it: the seed, and hence
every score, was fixed before the first fan arrived.

Scores
------

A participant is known publicly by a *pseudonym* (32 lowercase hex digits,
see below). Their score under algorithm ``A`` (a name such as
``boxoffice-prequeue-v1``) for event ``E`` (the decimal event id) is::

    mac   = HMAC-SHA256(key = seed, message = UTF-8 of "A|E|pseudonym")
    score = the first 50 bits of mac, read big-endian
          = int.from_bytes(mac[0:8], "big") >> 14

so a score is an integer in ``[0, 2**50)``. HMAC-SHA256 keyed with an
unknown seed behaves as a random function: before the reveal nobody can
predict a score, and every score is uniform and independent of the others.

Order
-----

Participants are ordered by ascending score; two equal scores (about
``n**2 / 2**51`` likely among ``n`` participants: 1 in 2,000 for a million)
are ordered by ascending pseudonym (as ASCII strings). Rank 1 is the first.

Pseudonyms
----------

A pseudonym lets a fan find themselves in the published list without the
list naming any account. The service computes it as::

    pseudonym = hex of the first 16 bytes of
                HMAC-SHA256(key = pseudonym key,
                            message = UTF-8 of "boxoffice-pseudonym-v1|E|customer id")

with a second secret of 32 bytes per draw, the *pseudonym key*, which is
never published (not even with the seed). A verifier never needs it: the
checks below take the pseudonyms as given. Keeping the key secret is what
makes the list anonymous for good. Customer ids are often guessable (an
e-mail, a name, a small number); an unkeyed hash of one, or a hash salted
with a value published later, could be reversed by hashing guesses, while
this keyed hash cannot be computed for a guess without the key. A fan
learns their own pseudonym from the service when they join (it is
deterministic, so every join answers the same one) and checks, after the
reveal, that it is listed with the score this module computes.

What a verifier checks (``boxoffice_cli.verify_draw``): the seed hashes to
the commitment; every listed score is :func:`score` of its pseudonym; the
list is in :func:`order_key` order with ranks 1, 2, ...; no pseudonym is
listed twice.

What it does not prove: that the list holds every fan (each fan checks
their own line, with the pseudonym they were given when they joined), and
that the seed was not chosen, before the commitment, to favour an account
known in advance (the operator holds the pseudonym key and could draw seeds
until one suits). Ruling out the latter needs randomness nobody knows when
committing, such as a public randomness beacon's round after the opening,
mixed into the seed: a later algorithm version.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Iterable
from dataclasses import dataclass

# The pre-queue's shuffle; the name is part of every score's message, so a
# later algorithm (or another kind of draw) never shares scores with it.
PRE_QUEUE_V1 = "boxoffice-prequeue-v1"
# A verified-fan draw: registered fans in the same kind of order, the first
# `winners` of which win (each draw has a seed and pseudonym key of its own).
FAN_DRAW_V1 = "boxoffice-fandraw-v1"
ALGORITHMS = frozenset({PRE_QUEUE_V1, FAN_DRAW_V1})

SEED_BYTES = 32
PSEUDONYM_KEY_BYTES = 32
SCORE_BITS = 50
SCORE_LIMIT = 2**SCORE_BITS
PSEUDONYM_HEX_DIGITS = 32

_PSEUDONYM_LABEL = "boxoffice-pseudonym-v1"


def commitment(seed: bytes) -> str:
    """The public commitment to ``seed``: SHA-256, 64 lowercase hex digits."""
    return hashlib.sha256(seed).hexdigest()


def score(seed: bytes, event_id: int, pseudonym: str, *, algorithm: str = PRE_QUEUE_V1) -> int:
    """The participant's score in ``[0, 2**50)``: the first 50 bits of
    HMAC-SHA256(seed, "<algorithm>|<event_id>|<pseudonym>")."""
    message = f"{algorithm}|{event_id}|{pseudonym}".encode()
    mac = hmac.new(seed, message, hashlib.sha256).digest()
    return int.from_bytes(mac[:8], "big") >> (64 - SCORE_BITS)


def pseudonym(key: bytes, event_id: int, customer_id: str) -> str:
    """A customer's pseudonym for one draw: the first 16 bytes, in hex, of
    HMAC-SHA256(key, "boxoffice-pseudonym-v1|<event_id>|<customer_id>"),
    with a key that is never published."""
    message = f"{_PSEUDONYM_LABEL}|{event_id}|{customer_id}".encode()
    return hmac.new(key, message, hashlib.sha256).hexdigest()[:PSEUDONYM_HEX_DIGITS]


def is_pseudonym(value: str) -> bool:
    """Whether ``value`` has a pseudonym's form (32 lowercase hex digits)."""
    return len(value) == PSEUDONYM_HEX_DIGITS and all(c in "0123456789abcdef" for c in value)


@dataclass(frozen=True, slots=True)
class Entry:
    """One participant of a draw: their pseudonym and their score."""

    pseudonym: str
    score: int


def order_key(entry: Entry) -> tuple[int, str]:
    """Where an entry sorts: ascending score, then ascending pseudonym."""
    return (entry.score, entry.pseudonym)


def order(entries: Iterable[Entry]) -> list[Entry]:
    """The entries in the draw's order (rank 1 first)."""
    return sorted(entries, key=order_key)


def draw(seed: bytes, event_id: int, pseudonyms: Iterable[str], *, algorithm: str = PRE_QUEUE_V1) -> list[Entry]:
    """Every pseudonym's entry, in the draw's order."""
    return order(Entry(p, score(seed, event_id, p, algorithm=algorithm)) for p in pseudonyms)
