"""``boxoffice verify-draw``: checks a published draw from public data alone.

Usage::

    boxoffice verify-draw [--commitment HEX] [--save FILE] SOURCE

SOURCE is the public proof document of an event's pre-queue shuffle
(QueueService.GetPreQueueProof in the proto3 JSON mapping, as the edge
serves it) or of its verified-fan draw (GetFanDrawProof, the same form
with the number of winners): a file saved from it, or its http(s) URL, whose pages are all
fetched (each page's ``nextPageToken`` is sent back as ``pageToken``). A
file may hold one page, or a JSON list of the pages in order.

The command recomputes everything with :mod:`boxoffice.draw` and nothing
else: the seed's SHA-256 is the commitment (and the one given with
``--commitment``, saved before the opening); every participant's score is
the algorithm's score of their pseudonym; the participants are listed in the
draw's order with ranks 1, 2, ...; nobody is listed twice; the count is the
number listed. It prints ``OK`` and what it checked, or one line per problem
naming the participant, and exits 0 when everything holds, 1 otherwise.

This module imports no service and no generated code: a verifier needs
only Python's standard library and ``boxoffice/draw.py``.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from boxoffice import draw

# Problems printed at most; the rest are counted.
MAX_PROBLEMS_SHOWN = 50
# Pages fetched at most from a URL (a server that never ends is an error).
MAX_PAGES = 100_000
_HEX64 = re.compile(r"^[0-9a-f]{64}$")


class BadDocument(Exception):
    """The source cannot be read as a proof document."""


@dataclass(frozen=True, slots=True)
class Participant:
    """One line of the published list, as published (values unchecked)."""

    index: int  # 1-based position in the list
    rank: object
    pseudonym: object
    score: object


@dataclass
class Proof:
    """The published document, all pages merged."""

    event_id: int
    algorithm: str
    commitment: str
    revealed: bool
    seed: str
    participant_count: int | None
    participants: list[Participant] = field(default_factory=list)
    complete: bool = True
    # A verified-fan draw's: how many won (the first of the order), and the lane.
    winners: int | None = None
    lane: str = ""

    @property
    def what(self) -> str:
        if self.algorithm == draw.FAN_DRAW_V1:
            return "verified-fan draw"
        return "pre-queue draw"


def _field(page: Mapping[str, Any], camel: str) -> Any:
    """A field by its JSON name or its proto name (both are proto3 JSON)."""
    if camel in page:
        return page[camel]
    snake = re.sub(r"([A-Z])", lambda m: "_" + m.group(1).lower(), camel)
    return page.get(snake)


def _integer(value: object) -> int | None:
    """A JSON integer, or a decimal string (proto3 JSON's int64)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, str) and re.fullmatch(r"-?[0-9]+", value):
        return int(value)
    return None


def merge(pages: Sequence[Any]) -> Proof:
    """The pages of one document as one proof; BadDocument when they are
    not pages of one event's document."""
    if not pages:
        raise BadDocument("the document has no page")
    proof: Proof | None = None
    for number, page in enumerate(pages, start=1):
        if not isinstance(page, dict):
            raise BadDocument(f"page {number} is not a JSON object")
        event_id = _integer(_field(page, "eventId"))
        if event_id is None:
            raise BadDocument(f"page {number} has no eventId")
        algorithm = str(_field(page, "algorithm") or "")
        commitment = str(_field(page, "commitment") or "")
        seed = str(_field(page, "seed") or "")
        revealed = bool(_field(page, "revealed")) or bool(seed)
        count_value = _field(page, "participantCount")
        count = 0 if count_value is None and revealed else _integer(count_value)
        lines = _field(page, "participants") or []
        if not isinstance(lines, list):
            raise BadDocument(f"page {number}: participants is not a list")
        if proof is None:
            proof = Proof(event_id, algorithm, commitment, revealed, seed, count)
            winners = _field(page, "winners")
            proof.winners = None if winners is None else _integer(winners)
            proof.lane = str(_field(page, "lane") or "")
        elif (event_id, algorithm, commitment, seed) != (proof.event_id, proof.algorithm, proof.commitment, proof.seed):
            raise BadDocument(f"page {number} is not a page of the same document (event, algorithm, commitment, seed)")
        for line in lines:
            if not isinstance(line, dict):
                raise BadDocument(f"page {number}: a participant is not a JSON object")
            proof.participants.append(
                Participant(
                    index=len(proof.participants) + 1,
                    rank=_field(line, "rank"),
                    pseudonym=_field(line, "pseudonym"),
                    # proto3 JSON leaves a zero out.
                    score=_field(line, "score") if _field(line, "score") is not None else 0,
                )
            )
        proof.complete = not _field(page, "nextPageToken")
    assert proof is not None
    return proof


def check(proof: Proof, *, commitment: str | None = None) -> list[str]:
    """Every problem of the proof, one line each (none: it verifies)."""
    problems: list[str] = []
    saved = commitment.strip().lower() if commitment else None
    if proof.algorithm not in draw.ALGORITHMS:
        known = ", ".join(sorted(draw.ALGORITHMS))
        problems.append(f"algorithm {proof.algorithm!r} is not one this verifier knows ({known})")
    if not _HEX64.match(proof.commitment):
        problems.append(f"commitment {proof.commitment!r} is not 64 lowercase hex digits")
    if saved is not None and saved != proof.commitment:
        problems.append(f"commitment {proof.commitment} is not the commitment you saved ({saved})")
    if not proof.revealed or not proof.seed:
        problems.append("the seed is not revealed yet (the pre-queue has not opened): nothing to verify")
        return problems
    if not _HEX64.match(proof.seed):
        problems.append(f"seed {proof.seed!r} is not 64 lowercase hex digits")
        return problems
    seed = bytes.fromhex(proof.seed)
    hashed = draw.commitment(seed)
    if hashed != proof.commitment:
        problems.append(
            f"seed does not match the commitment: SHA-256(seed) is {hashed}, the commitment {proof.commitment}"
        )
    if saved is not None and hashed != saved:
        problems.append(f"seed does not match the commitment you saved: SHA-256(seed) is {hashed}, you saved {saved}")
    if not proof.complete:
        problems.append("the document is incomplete: its last page has a nextPageToken (fetch every page)")
    if proof.participant_count is None:
        problems.append("participantCount is not an integer")
    elif proof.participant_count != len(proof.participants):
        problems.append(
            f"participantCount is {proof.participant_count} but {len(proof.participants)} participants are listed"
        )
    algorithm = proof.algorithm if proof.algorithm in draw.ALGORITHMS else draw.PRE_QUEUE_V1
    seen: dict[str, int] = {}
    previous: tuple[int, draw.Entry] | None = None
    for line in proof.participants:
        where = f"participant #{line.index}"
        rank, score = _integer(line.rank), _integer(line.score)
        pseudonym = line.pseudonym if isinstance(line.pseudonym, str) else None
        if rank != line.index:
            problems.append(f"{where}: rank is {line.rank!r}, expected {line.index}")
        if pseudonym is None or not draw.is_pseudonym(pseudonym):
            problems.append(f"{where}: pseudonym {line.pseudonym!r} is not 32 lowercase hex digits")
            continue
        where = f"{where} (pseudonym {pseudonym})"
        if pseudonym in seen:
            problems.append(f"{where}: listed twice, also as participant #{seen[pseudonym]}")
        seen.setdefault(pseudonym, line.index)
        if score is None or not 0 <= score < draw.SCORE_LIMIT:
            problems.append(f"{where}: score {line.score!r} is not an integer in [0, 2^{draw.SCORE_BITS})")
            continue
        expected = draw.score(seed, proof.event_id, pseudonym, algorithm=algorithm)
        if score != expected:
            problems.append(f"{where}: score {score} is wrong: the seed gives {expected}")
        entry = draw.Entry(pseudonym, score)
        if previous is not None and draw.order_key(entry) <= draw.order_key(previous[1]):
            problems.append(f"{where}: out of order: it must come before participant #{previous[0]}")
        previous = (line.index, entry)
    return problems


def _with_page_token(url: str, token: str) -> str:
    parts = urllib.parse.urlsplit(url)
    query = [(k, v) for k, v in urllib.parse.parse_qsl(parts.query, keep_blank_values=True) if k != "pageToken"]
    if token:
        query.append(("pageToken", token))
    return urllib.parse.urlunsplit(parts._replace(query=urllib.parse.urlencode(query)))


def fetch_pages(url: str, *, timeout_seconds: float = 30.0) -> list[Any]:
    """Every page of the document at ``url``, in order."""
    pages: list[Any] = []
    token = ""
    tokens: set[str] = set()
    while len(pages) < MAX_PAGES:
        request = urllib.request.Request(_with_page_token(url, token), headers={"Accept": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=timeout_seconds) as answer:
                page = json.loads(answer.read())
        except urllib.error.HTTPError as err:
            raise BadDocument(f"{err.url} answered HTTP {err.code}") from None
        except (urllib.error.URLError, OSError) as err:
            raise BadDocument(f"cannot fetch {url}: {err}") from None
        except ValueError:
            raise BadDocument(f"page {len(pages) + 1} of {url} is not JSON") from None
        pages.append(page)
        token = str(_field(page, "nextPageToken") or "") if isinstance(page, dict) else ""
        if not token:
            return pages
        if token in tokens:
            raise BadDocument(f"{url} answered the same nextPageToken twice")
        tokens.add(token)
    raise BadDocument(f"{url} has more than {MAX_PAGES} pages")


def read_pages(source: str) -> list[Any]:
    """The pages of the document at ``source``: an http(s) URL, or a file."""
    if source.startswith(("http://", "https://")):
        return fetch_pages(source)
    try:
        text = Path(source).read_text(encoding="utf-8")
    except OSError as err:
        raise BadDocument(f"cannot read {source}: {err.strerror or err}") from None
    try:
        document = json.loads(text)
    except ValueError:
        raise BadDocument(f"{source} is not JSON") from None
    return document if isinstance(document, list) else [document]


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="boxoffice verify-draw",
        description="Check an event's published pre-queue shuffle from its public proof document alone.",
    )
    parser.add_argument("source", help="the proof document: a saved JSON file, or its http(s) URL")
    parser.add_argument("--commitment", metavar="HEX", help="the commitment you saved before the opening")
    parser.add_argument("--save", metavar="FILE", help="also write the document (every page, merged) to FILE")
    return parser


def _merged_json(pages: Sequence[Any]) -> str:
    """The pages as one document: the first page's fields, every page's
    participants, no next page."""
    first = dict(pages[0])
    participants: list[Any] = []
    for page in pages:
        participants.extend(_field(page, "participants") or [])
    for name in ("nextPageToken", "next_page_token"):
        first.pop(name, None)
    first.pop("participants", None)
    first["participants"] = participants
    return json.dumps(first, indent=2) + "\n"


def main(argv: Sequence[str], *, out: TextIO | None = None) -> int:
    """Run the command; 0 when the draw verifies, 1 when it does not (or
    the document cannot be read), 2 for a usage error."""
    stdout = out or sys.stdout
    try:
        args = _parser().parse_args(list(argv))
    except SystemExit as exit_:
        return int(exit_.code or 0)
    try:
        pages = read_pages(args.source)
        proof = merge(pages)
    except BadDocument as err:
        print(f"FAILED: {err}", file=stdout)
        return 1
    if args.save:
        Path(args.save).write_text(_merged_json(pages), encoding="utf-8")
    problems = check(proof, commitment=args.commitment)
    if problems:
        print(f"FAILED: event {proof.event_id}'s {proof.what} does not verify:", file=stdout)
        for problem in problems[:MAX_PROBLEMS_SHOWN]:
            print(f"  {problem}", file=stdout)
        if len(problems) > MAX_PROBLEMS_SHOWN:
            print(f"  ... and {len(problems) - MAX_PROBLEMS_SHOWN} more problems", file=stdout)
        return 1
    saved = " and the one you saved" if args.commitment else ""
    won = ""
    if proof.winners is not None:
        won = f"; the first {min(proof.winners, len(proof.participants))} won codes to lane {proof.lane!r}"
    print(
        f"OK: event {proof.event_id}'s {proof.what} ({proof.algorithm}): SHA-256 of the seed is the commitment"
        f" {proof.commitment}{saved}; {len(proof.participants)} participants, every score recomputed from the"
        f" seed and listed in the draw's order{won}",
        file=stdout,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
