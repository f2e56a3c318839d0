"""The chaos run's host faults: how the nemesis brings a host's node back into Ray after a fault healed
(``raygroups.chaos.hosts.back_in_ray``), against a scripted Ray node table."""

from __future__ import annotations

import pytest

from raygroups.chaos.hosts import back_in_ray


class Hosts:
    """Records the hosts Ray was started on; starting Ray makes a new incarnation join (unless ``joins``
    is False)."""

    head = "rg-head"

    def __init__(self, table: dict[str, list[set[str]]], joins: bool = True) -> None:
        self.table = table  # host -> the successive answers of Ray's node table
        self.started: list[str] = []
        self.joins = joins

    def start_ray(self, host: str) -> None:
        self.started.append(host)
        if self.joins:
            self.table[host] = [{"new-incarnation"}]

    def alive(self, host: str) -> set[str]:
        answers = self.table[host]
        return answers.pop(0) if len(answers) > 1 else answers[0]


def test_a_node_alive_through_the_grace_is_kept_and_ray_is_not_started_on_it():
    hosts = Hosts({"rg-coord-a": [{"n1"}]})
    assert back_in_ray(hosts, "rg-coord-a", {"n1"}, kept_after_s=0.3, alive=hosts.alive) == "kept"
    assert hosts.started == []


def test_a_node_declared_dead_just_after_the_heal_is_started_again():
    # Alive at the heal, then a health check that ran during the fault declares it dead.
    hosts = Hosts({"rg-coord-b": [{"n1"}, {"n1"}, set()]})
    assert back_in_ray(hosts, "rg-coord-b", {"n1"}, kept_after_s=5, alive=hosts.alive) == "restarted"
    assert hosts.started == ["rg-coord-b"]


def test_a_node_whose_ray_does_not_join_again_fails_the_fault_naming_the_host_and_the_limit():
    hosts = Hosts({"rg-coord-c": [set()]}, joins=False)
    with pytest.raises(TimeoutError, match=r"rg-coord-c did not join Ray again within 0.5 s"):
        back_in_ray(hosts, "rg-coord-c", {"n1"}, timeout_s=0.5, alive=hosts.alive)
    assert hosts.started == ["rg-coord-c"]
