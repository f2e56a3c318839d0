"""ManualClock: the convention of Kafka's ``MockCoordinatorTimer`` (advance the ``MockTime``, then
every timer whose deadline is ``<= now`` fires, in deadline order)."""

import pytest
from raygroups.coordinator.clock import ManualClock


def test_advance_moves_time_then_fires_due_timers_in_deadline_order():
    clock = ManualClock(100)
    timers = clock.timers()
    fired = []
    timers.schedule("b", 20, lambda: fired.append(("b", clock.now_ms())))
    timers.schedule("a", 10, lambda: fired.append(("a", clock.now_ms())))
    timers.schedule("c", 30, lambda: fired.append(("c", clock.now_ms())))
    clock.advance(20)
    assert fired == [("a", 120), ("b", 120)]
    assert timers.is_scheduled("c") and not timers.is_scheduled("a")


def test_ties_fire_in_scheduling_order_across_timer_namespaces():
    clock = ManualClock(0)
    t1, t2 = clock.timers(), clock.timers()
    fired = []
    t2.schedule("x", 5, lambda: fired.append("t2"))
    t1.schedule("x", 5, lambda: fired.append("t1"))
    clock.advance(5)
    assert fired == ["t2", "t1"]


def test_rescheduling_a_key_replaces_it_and_cancel_removes_it():
    clock = ManualClock(0)
    timers = clock.timers()
    fired = []
    timers.schedule("k", 5, lambda: fired.append(1))
    timers.schedule("k", 50, lambda: fired.append(2))
    clock.advance(10)
    assert fired == []
    timers.cancel("k")
    clock.advance(100)
    assert fired == []


def test_timers_armed_while_firing_count_from_the_advanced_time():
    clock = ManualClock(0)
    timers = clock.timers()
    fired = []

    def first():
        fired.append(clock.now_ms())
        timers.schedule("second", 0, lambda: fired.append(("second", clock.now_ms())))
        timers.schedule("third", 10, lambda: fired.append(("third", clock.now_ms())))

    timers.schedule("first", 5, first)
    clock.advance(8)
    assert fired == [8, ("second", 8)]
    clock.advance(9)
    assert fired == [8, ("second", 8)]
    clock.advance(1)
    assert fired[-1] == ("third", 18)


@pytest.mark.parametrize("bad", [-1, 1.5, "1", True])
def test_advance_rejects_bad_values(bad):
    with pytest.raises((TypeError, ValueError), match="ms"):
        ManualClock(0).advance(bad)
