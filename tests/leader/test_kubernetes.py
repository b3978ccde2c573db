"""Leader election on a Kubernetes Lease, against a stand-in of the
coordination.k8s.io/v1 Lease endpoints that enforces resourceVersion
conflicts (409) like the real API server.

Timings: lease 3 s, renew deadline 2 s, retry 0.25 s; the only time bounds
asserted are generous multiples of the lease.
"""

from __future__ import annotations

import asyncio

from tests.leader.support import Candidates, Timeline, lease_stand_in, timing_env, wait_until

LEASE, RENEW, RETRY = 3, 2.0, 0.25
NAMESPACE = "boxoffice"
NAME = "admitter"
LEASE_NAME = f"boxoffice-{NAME}"
GENEROUS = 4 * LEASE


def _environ(api_url: str) -> dict[str, str]:
    return {
        "BOXOFFICE_LEADER_BACKEND": "kubernetes",
        "BOXOFFICE_LEADER_KUBE_API_URL": api_url,
        "POD_NAMESPACE": NAMESPACE,
        **timing_env(LEASE, RENEW, RETRY),
    }


async def test_one_leads_and_the_other_takes_over_after_the_lease() -> None:
    timeline = Timeline()
    candidates = Candidates(timeline)
    async with lease_stand_in() as api:
        url_a, url_b = await api.frontend(), await api.frontend()
        try:
            candidates.start("a", "postgresql://unused", _environ(url_a), name=NAME)
            await wait_until(lambda: timeline.leader() == "a", GENEROUS, "a leads")
            candidates.start("b", "postgresql://unused", _environ(url_b), name=NAME)
            # Several lease durations of renewals: b never gets in.
            await asyncio.sleep(2 * LEASE)
            assert [t.who for t in timeline.terms] == ["a"]
            assert api.holder(NAMESPACE, LEASE_NAME) == "a"
            a = timeline.terms[0]
            assert api.transitions(NAMESPACE, LEASE_NAME) == a.epoch

            # a loses the API server: it stops leading at its renew deadline;
            # b takes over once the lease has run out, in a new term.
            api.stall(url_a)
            await wait_until(lambda: timeline.last_of("b") is not None, GENEROUS, "b takes over")
            b = timeline.terms[-1]
            assert a.stopped is not None and a.stopped < b.started
            assert b.epoch > a.epoch
            assert api.holder(NAMESPACE, LEASE_NAME) == "b"
            assert api.transitions(NAMESPACE, LEASE_NAME) == b.epoch
            assert timeline.overlaps() == []
        finally:
            await candidates.stop_all()


async def test_cancelling_the_leader_releases_the_lease_for_a_prompt_handover() -> None:
    timeline = Timeline()
    candidates = Candidates(timeline)
    async with lease_stand_in() as api:
        url = await api.frontend()
        try:
            candidates.start("a", "postgresql://unused", _environ(url), name=NAME)
            await wait_until(lambda: timeline.leader() == "a", GENEROUS, "a leads")
            candidates.start("b", "postgresql://unused", _environ(url), name=NAME)
            await asyncio.sleep(4 * RETRY)
            await candidates.stop("a")
            # Released (holder cleared), so b need not wait for the lease.
            assert api.holder(NAMESPACE, LEASE_NAME) is None
            await wait_until(lambda: timeline.leader() == "b", GENEROUS, "b takes over")
            assert timeline.terms[1].epoch == timeline.terms[0].epoch + 1
            await candidates.stop("b")
            assert timeline.running() == []
            assert api.holder(NAMESPACE, LEASE_NAME) is None
        finally:
            await candidates.stop_all()


async def _race(*, enforce_versions: bool) -> tuple[Timeline, int]:
    """Two candidates read a free Lease at the same moment (the stand-in
    holds both reads until both arrived) and both try to take it."""
    timeline = Timeline()
    candidates = Candidates(timeline)
    async with lease_stand_in(enforce_versions=enforce_versions) as api:
        url = await api.frontend()
        # A free Lease (released by an earlier holder), so both may take it.
        candidates.start("seed", "postgresql://unused", _environ(url), name=NAME)
        await wait_until(lambda: timeline.leader() == "seed", GENEROUS, "seed leads")
        await candidates.stop("seed")
        api.hold_reads(2)
        try:
            candidates.start("a", "postgresql://unused", _environ(url), name=NAME)
            candidates.start("b", "postgresql://unused", _environ(url), name=NAME)
            await wait_until(lambda: len(timeline.terms) >= 2, GENEROUS, "a term after the race")
            # Past the lease: the loser has not taken over.
            await asyncio.sleep(LEASE + 4 * RETRY)
        finally:
            await candidates.stop_all()
        return timeline, api.conflicts


async def test_racing_candidates_one_wins_by_resource_version() -> None:
    timeline, conflicts = await _race(enforce_versions=True)
    assert conflicts >= 1
    assert [t.who for t in timeline.terms].count("seed") == 1
    winners = [t for t in timeline.terms if t.who != "seed"]
    assert len(winners) == 1
    assert timeline.overlaps() == []


async def test_control_without_resource_versions_both_lead() -> None:
    # The stand-in ignoring resourceVersion (last write wins) lets both
    # racers believe they lead: the check above is what catches it.
    timeline, conflicts = await _race(enforce_versions=False)
    assert conflicts == 0
    assert timeline.overlaps() != []
