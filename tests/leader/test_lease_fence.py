"""With the Kubernetes Lease election, the admitter confirms its epoch
against the Lease (its ``leaseTransitions``) before every tick, as it does
against ``leader_epochs`` with the Postgres election: when Redis's copy of
the fence is behind (a failover lost the newest leader's write, or the new
leader has not written yet), a deposed admitter still writes nothing."""

from __future__ import annotations

from boxoffice.leader._config import lease_name
from boxoffice.leader._kubernetes import LeaseEpochs, LeaseLock, api_configuration
from boxoffice.redis import event_key
from queue_svc import app
from queue_svc.app import QueueApp
from tests.leader.support import lease_stand_in
from tests.queue.harness import NO_LIMITS, AlwaysLeader, new_event_id, room_config, started
from tests.support import ManualClock, Stores, make_runtime

NAMESPACE = "boxoffice"


async def test_a_deposed_admitter_on_the_lease_election_writes_nothing_when_redis_is_behind(stores: Stores) -> None:
    clock = ManualClock()
    async with lease_stand_in() as api:
        url = await api.frontend()
        lease_env = {
            "BOXOFFICE_LEADER_BACKEND": "kubernetes",
            "BOXOFFICE_LEADER_KUBE_API_URL": url,
            "POD_NAMESPACE": NAMESPACE,
            "BOXOFFICE_QUEUE_EVENT_REFRESH_SECONDS": "600",
        }
        deposed = QueueApp(make_runtime(stores, environ=lease_env, clock=clock))
        # The control: an admitter with only Redis's copy of the epoch.
        redis_only = QueueApp(make_runtime(stores, clock=clock), leadership=AlwaysLeader(0))
        epochs = deposed.leader_epochs
        assert isinstance(epochs, LeaseEpochs) and redis_only.leader_epochs is None
        assert epochs in deposed.components("admitter")  # its API client is closed at shutdown

        def candidate(identity: str) -> LeaseLock:
            return LeaseLock(
                configuration=api_configuration(url),
                namespace=NAMESPACE,
                lease_name=lease_name(app.LEADER_ROLE),
                identity=identity,
                lease_seconds=30,
            )

        first, second = candidate("admitter-a"), candidate("admitter-b")
        event_id = new_event_id()
        async with started(deposed, epochs), started(redis_only):
            assert await epochs.current() is None  # no term yet
            now_ms = int(clock.now() * 1000)
            room = await deposed.rooms.create(
                room_config(event_id, opens_at_ms=now_ms - 1000, admission_rate_per_second=5)
            )
            await deposed.store.put_config(room)
            for i in range(50):
                await deposed.store.join(event_id, f"fan-{i}", "", now_ms=now_ms, random_score=0, limits=NO_LIMITS)

            old_epoch = await first.try_acquire()
            assert old_epoch is not None
            assert await epochs.current() == old_epoch
            await deposed.admitter.tick(old_epoch)
            clock.advance(1.0)
            ticked = await deposed.admitter.tick(old_epoch)
            assert any(r.event_id == event_id and r.admitted == 5 for r in ticked), ticked

            # A new term begins; Redis's fence still holds the old epoch.
            await first.release()
            new_epoch = await second.try_acquire()
            assert new_epoch is not None and new_epoch > old_epoch
            assert await epochs.current() == new_epoch
            redis = deposed.rt.redis()
            progress_key = event_key(event_id, "prog")
            assert int(await redis.hget(progress_key, "epoch") or 0) == old_epoch
            admitted = int(await redis.hget(progress_key, "admitted") or 0)

            def stale_ticks() -> float:
                return deposed.rt.registry.get_sample_value("boxoffice_queue_admit_stale_epoch_total") or 0.0

            # (The suite's other events' fences count too: read the change.)
            before = stale_ticks()
            clock.advance(1.0)
            assert await deposed.admitter.tick(old_epoch) == []
            assert int(await redis.hget(progress_key, "admitted") or 0) == admitted
            assert stale_ticks() == before + 1
            assert await deposed.admitter.confirm(new_epoch)

            # Without that check Redis alone would have let it in.
            unfenced = await redis_only.admitter.tick_event(event_id, old_epoch)
            assert unfenced is not None and not unfenced.stale_epoch and unfenced.admitted > 0

            # A Lease that cannot be read confirms nothing: the tick waits.
            api.stall(url)
            assert not await deposed.admitter.confirm(new_epoch)
            await second.close()
