"""The node listeners' liveness rule: judged by renewals seen on the watcher's own clock, never by comparing
a timestamp another host wrote (Kafka's ``BrokerHeartbeatManager`` goes by heartbeats received)."""

from __future__ import annotations

from raygroups.gateway.node import LISTENER_STALE_S, RenewalWatch


def registration(incarnation: str, renewal: int) -> dict:
    return {"node_id": 1, "host": "198.18.0.11", "port": 9092, "incarnation": incarnation, "renewal": renewal}


def test_a_registration_is_live_from_its_first_renewal_seen_while_renewals_keep_coming():
    watch = RenewalWatch()
    # First sight: maybe a dead node's leftover registration; live once it is seen renewed.
    assert watch.live({"n1": registration("a", 1)}, now=100.0) == {}
    assert set(watch.live({"n1": registration("a", 2)}, now=100.5)) == {"n1"}
    assert set(watch.live({"n1": registration("a", 2)}, now=100.5 + LISTENER_STALE_S)) == {"n1"}
    assert watch.live({"n1": registration("a", 2)}, now=100.6 + LISTENER_STALE_S) == {}
    # A renewal brings it back, counted from when this watcher saw it.
    assert set(watch.live({"n1": registration("a", 3)}, now=200.0)) == {"n1"}
    assert watch.live({"n1": registration("a", 3)}, now=200.1 + LISTENER_STALE_S) == {}


def test_a_dead_nodes_leftover_registration_is_never_live():
    watch = RenewalWatch()
    for t in (0.0, 0.5, 1.0, 10.0):
        assert watch.live({"gone": registration("a", 7)}, now=t) == {}


def test_a_restarted_listener_counts_as_renewed_even_at_the_same_count():
    watch = RenewalWatch()
    watch.live({"n1": registration("a", 3)}, now=0.0)
    assert watch.live({"n1": registration("a", 3)}, now=10.0) == {}
    assert set(watch.live({"n1": registration("b", 3)}, now=10.0)) == {"n1"}


def test_the_wall_clock_written_in_a_registration_plays_no_part():
    # A host whose clock is a year ahead: only whether the mark changes matters.
    watch = RenewalWatch()
    watch.live({"n1": {**registration("a", 1), "at": 86_400.0 * 365}}, now=0.0)
    skewed = {**registration("a", 2), "at": 86_400.0 * 365}
    assert set(watch.live({"n1": skewed}, now=1.0)) == {"n1"}
    assert watch.live({"n1": skewed}, now=1.1 + LISTENER_STALE_S) == {}


def test_a_removed_registration_is_forgotten_and_seen_anew_when_it_returns():
    watch = RenewalWatch()
    watch.live({"n1": registration("a", 1), "n2": registration("c", 1)}, now=0.0)
    assert set(watch.live({"n2": registration("c", 2)}, now=1.0)) == {"n2"}
    assert watch.live({"n1": registration("a", 1), "n2": registration("c", 2)}, now=2.0) == {"n2": registration("c", 2)}
    assert set(watch.live({"n1": registration("a", 2), "n2": registration("c", 3)}, now=2.5)) == {"n1", "n2"}
