"""mount() puts the areas' endpoints together against the route table: every
route answered by exactly one area, no endpoint for a route the table does
not have."""

from __future__ import annotations

from collections.abc import Mapping

import pytest
from starlette.responses import Response

from edge_svc.endpoints.common import mount
from edge_svc.http import Ctx, Handler
from edge_svc.routes import ROUTES


async def _answer(ctx: Ctx) -> Response:
    return Response(b"")


class _Area:
    def __init__(self, names: list[str]) -> None:
        self._names = names

    def endpoints(self) -> Mapping[str, Handler]:
        return dict.fromkeys(self._names, _answer)


NAMES = [route.name for route in ROUTES]


def test_every_route_answered_once_is_mounted() -> None:
    half = len(NAMES) // 2
    table = mount(_Area(NAMES[:half]), _Area(NAMES[half:]))
    assert sorted(table) == sorted(NAMES)


def test_a_route_without_an_endpoint_is_refused() -> None:
    with pytest.raises(ValueError, match=f"routes without an endpoint: {NAMES[-1]}$"):
        mount(_Area(NAMES[:-1]))


def test_a_route_answered_by_two_areas_is_refused() -> None:
    with pytest.raises(ValueError, match=f"route {NAMES[0]} has two endpoints"):
        mount(_Area(NAMES), _Area(NAMES[:1]))


def test_an_endpoint_of_no_route_is_refused() -> None:
    with pytest.raises(ValueError, match=r"endpoints of no route: NoSuchRoute$"):
        mount(_Area([*NAMES, "NoSuchRoute"]))
