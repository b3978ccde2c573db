"""The catalogue's query plans at scale: a database of N published events
(concerts and flights in three zones, with venues, cities, routes and two
sections each) made in a few statements, and the plan Postgres picks for each
way of searching it. Used by the plan test (no sequential scan at 100,000
events) and by ``bench/catalogue_bench.py`` (the plans' costs in the README).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg

from booking_svc.adapters.postgres.catalogue import SECTIONS_SQL, catalogue_sql
from booking_svc.model import CatalogueQuery, EventKind

START = datetime(2300, 1, 1, tzinfo=UTC)
_CITIES = "'Hà Nội','São Paulo','Lisboa','Đà Nẵng','Huế','Recife','Porto','Berlin','Paris','Osaka'"
_AIRPORTS = "'SGN','HAN','DAD','GRU','GIG','LIS','OPO','CDG','FRA','KIX','NRT','SIN'"
_WORDS = "'Mùa hè','Noite','Summer','Rock','Jazz','Ópera','Festival','Live'"


async def fill(conn: psycopg.AsyncConnection[Any], events: int) -> None:
    """``events`` events from START, one every 5 minutes, ids 1..events."""
    await conn.execute(
        f"""
        INSERT INTO events (event_id, display_name, kind, starts_at, hold_ttl_seconds, max_seats_per_customer,
                            time_zone, venue_name, venue_city, venue_country_code,
                            flight_code, flight_origin, flight_destination, flight_departs_at)
        SELECT g, (ARRAY[{_WORDS}])[g %% 8 + 1] || ' ' || g,
               CASE WHEN g %% 3 = 0 THEN 'FLIGHT' ELSE 'CONCERT' END,
               %(start)s + g * interval '5 minutes', 300, 4,
               (ARRAY['UTC', 'Asia/Ho_Chi_Minh', 'America/Sao_Paulo'])[g %% 3 + 1],
               CASE WHEN g %% 3 <> 0 THEN 'Venue ' || g %% 997 END,
               CASE WHEN g %% 3 <> 0 THEN (ARRAY[{_CITIES}])[g %% 10 + 1] END,
               CASE WHEN g %% 3 <> 0 THEN 'VN' END,
               CASE WHEN g %% 3 = 0 THEN 'VN' || (100 + g %% 9000) END,
               CASE WHEN g %% 3 = 0 THEN (ARRAY[{_AIRPORTS}])[g %% 12 + 1] END,
               CASE WHEN g %% 3 = 0 THEN (ARRAY[{_AIRPORTS}])[(g / 12) %% 11 + (CASE WHEN (g / 12) %% 11 >= g %% 12
                                                                  THEN 2 ELSE 1 END)] END,
               CASE WHEN g %% 3 = 0 THEN %(start)s + g * interval '5 minutes' END
          FROM generate_series(1, %(events)s) g
        """.encode(),
        {"start": START, "events": events},
    )
    await conn.execute(
        b"""
        INSERT INTO sections (event_id, section_id, display_name, kind, capacity, overbook_limit, price_minor, currency)
        SELECT g, s, s, 'GENERAL_ADMISSION', 100, 0, 1000 * (g %% 50 + 1) * CASE WHEN s = 'A' THEN 2 ELSE 1 END, 'EUR'
          FROM generate_series(1, %(events)s) g CROSS JOIN unnest(ARRAY['A', 'B']) s
        """,
        {"events": events},
    )
    await conn.execute(
        b"""
        INSERT INTO section_stripes (event_id, section_id, stripe, capacity)
        SELECT event_id, section_id, 0, capacity FROM sections WHERE event_id <= %(events)s
        """,
        {"events": events},
    )
    await conn.execute(b"ANALYZE events")
    await conn.execute(b"ANALYZE sections")
    await conn.execute(b"ANALYZE section_stripes")


@dataclass(frozen=True)
class Search:
    name: str
    query: CatalogueQuery


def searches() -> list[Search]:
    """One search per filter, and combinations, as fans make them."""
    after = START + timedelta(days=30)
    day = (START + timedelta(days=60)).date()
    return [
        Search("upcoming (no filter)", CatalogueQuery(starts_after=after)),
        Search("kind=flight", CatalogueQuery(kind=EventKind.FLIGHT, starts_after=after)),
        Search("q=a rare word (venue 5)", CatalogueQuery(words="venue 5", starts_after=after)),
        Search("q=a common word (rock)", CatalogueQuery(words="rock", starts_after=after)),
        Search("q=accented (mua he ha noi)", CatalogueQuery(words="mua he ha noi", starts_after=after)),
        Search("origin+destination", CatalogueQuery(origin="SGN", destination="HAN", starts_after=after)),
        Search(
            "origin+destination+date",
            CatalogueQuery(origin="SGN", destination="HAN", local_date=day, starts_after=START),
        ),
        Search("date", CatalogueQuery(local_date=day, starts_after=START)),
        Search("q+kind+date", CatalogueQuery(words="live", kind=EventKind.CONCERT, local_date=day, starts_after=START)),
        Search("start range", CatalogueQuery(starts_after=after, starts_before=after + timedelta(days=1))),
    ]


@dataclass(frozen=True)
class Plan:
    name: str
    cost: float
    nodes: list[str]

    @property
    def sequential(self) -> list[str]:
        return [n for n in self.nodes if n.startswith("Seq Scan")]


def _nodes(plan: dict[str, Any]) -> list[str]:
    here = plan["Node Type"] + (f" on {plan['Relation Name']}" if "Relation Name" in plan else "")
    if "Index Name" in plan:
        here += f" using {plan['Index Name']}"
    return [here] + [n for child in plan.get("Plans", []) for n in _nodes(child)]


async def explain(conn: psycopg.AsyncConnection[Any], sql: str, params: Any) -> tuple[float, list[str]]:
    # Parameters bound on the client: EXPLAIN then plans the values, as the
    # custom plans of the service's prepared statements do.
    cur = psycopg.AsyncClientCursor(conn)
    await cur.execute(f"EXPLAIN (FORMAT JSON) {sql}".encode(), params)
    row = await cur.fetchone()
    assert row is not None
    top = (row[0] if isinstance(row[0], list) else json.loads(row[0]))[0]["Plan"]
    return float(top["Total Cost"]), _nodes(top)


async def plans(conn: psycopg.AsyncConnection[Any], page_size: int = 20) -> list[Plan]:
    """Each search's page statement's plan, then the sections statement's for
    a page of ids (as ListEvents runs them)."""
    found = []
    for search in searches():
        sql, params = catalogue_sql(search.query, after=False, limit=page_size + 1)
        cost, nodes = await explain(conn, sql, params)
        found.append(Plan(search.name, cost, nodes))
    cost, nodes = await explain(
        conn,
        SECTIONS_SQL.decode(),
        (list(range(1000, 1000 + page_size + 1)),),
    )
    found.append(Plan("a page's sections and counters", cost, nodes))
    return found
