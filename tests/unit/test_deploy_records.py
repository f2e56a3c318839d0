"""What a deployment records about itself, without Ray: which names are a node's spare shard processes,
and resuming a deployment stored by an older version (before properties it did not know)."""

from __future__ import annotations

import pytest
from raygroups.coordinator.config import CoordinatorConfig

from raygroups.deployment.seam import is_spare_of, new_spare_name, spare_of
from raygroups.deployment.start import _resumable


def test_a_spare_belongs_to_its_node_only_even_when_node_names_share_a_prefix():
    name = new_spare_name("coord-a")
    assert is_spare_of(name, "coord-a")
    assert not is_spare_of(name, "coord") and not is_spare_of(new_spare_name("coord-a-b"), "coord-a")
    assert not is_spare_of("raygroups-shard-3", "coord-a") and not is_spare_of(name + "0", "coord-a")
    assert spare_of(name, "coord-a") == (True, None, False)


def test_a_spare_for_one_partition_names_its_partition_and_its_node_only():
    name = new_spare_name("coord-a", 12)
    assert spare_of(name, "coord-a") == (True, 12, False) and spare_of(new_spare_name("n", 0), "n") == (True, 0, False)
    assert spare_of(new_spare_name("n", cold=True), "n") == (True, None, True)
    # Node "coord-a-<id>" is another node; so is "coord", whose spare names could not end this way.
    untagged = new_spare_name("coord-a")
    assert spare_of(untagged + "-p3", untagged[len("raygroups-spare-"):]) == (False, None, False)
    assert spare_of(name, "coord") == (False, None, False) and spare_of(name + "x", "coord-a") == (False, None, False)
    assert spare_of(name.replace("-p12", "-p012"), "coord-a") == (False, None, False)


def test_a_deployment_stored_before_a_property_existed_resumes_with_its_default():
    wanted = {"num_partitions": 4, "data_dir": "/d", "config": CoordinatorConfig().to_properties()}
    old = {**wanted, "replicated": True,
           "config": {k: v for k, v in wanted["config"].items() if k != "shard.session.timeout.ms"}}
    assert _resumable(old, wanted, "ns", config_given=True) == CoordinatorConfig()
    changed = {**wanted, "config": {**wanted["config"], "shard.session.timeout.ms": 1_000}}
    with pytest.raises(ValueError, match="other values of shard.session.timeout.ms"):
        _resumable(old, changed, "ns", config_given=True)


def test_a_resumed_deployment_keeps_its_listeners_and_refuses_other_ones():
    from raygroups.deployment.start import _resumed_listeners, listener_spec

    spec = listener_spec("0.0.0.0:9092", None, None)
    stored = {"num_partitions": 4, "listeners": spec["kwargs"]}
    # Resumed without listeners: the ones it was deployed with; with the same ones: those.
    assert _resumed_listeners(stored, {"listeners": None}, "ns", None)["kwargs"] == spec["kwargs"]
    assert _resumed_listeners(stored, {"listeners": spec["kwargs"]}, "ns", spec)["kwargs"] == spec["kwargs"]
    other = listener_spec("0.0.0.0:9093", "kafka.example", None)
    with pytest.raises(ValueError, match="runs with listeners .*9092.*not .*9093.*shut it down"):
        _resumed_listeners(stored, {"listeners": other["kwargs"]}, "ns", other)
    # Deployed without listeners: listeners now are a change too.
    with pytest.raises(ValueError, match="runs with listeners None"):
        _resumed_listeners({"listeners": None}, {"listeners": spec["kwargs"]}, "ns", spec)
    assert _resumed_listeners({"listeners": None}, {"listeners": None}, "ns", None) is None
    # Recorded before listeners existed: what this call gives.
    assert _resumed_listeners({"num_partitions": 4}, {"listeners": spec["kwargs"]}, "ns", spec) is spec
