"""The operator's commands (``raygroups groups|offsets|status``) against a running embedded default, through
click's runner in this process (the deployment found by ``--namespace``, as from any host of the cluster):
what each prints and exits with, and that bad input is one sentence, exit 1 and changes nothing."""

from __future__ import annotations

import json

import pytest
import ray
from click.testing import CliRunner
from raygroups.coordinator.consumer_protocol import (
    Assignment,
    Subscription,
    encode_assignment,
    encode_subscription,
)

from raygroups import Errors, SyntheticSource
from raygroups.cli import main

pytestmark = pytest.mark.ray

SOURCE = SyntheticSource({"orders": 3}, records_per_partition=100)


def _cli(cluster, *args):
    result = CliRunner().invoke(main, [*args, "--namespace", cluster.namespace])
    return result.exit_code, result.stdout, result.stderr


def _stable_member(client, group="g"):
    sub = encode_subscription(Subscription(topics=("orders",)))
    join = dict(group_id=group, protocol_type="consumer", protocols=[("range", sub)], session_timeout_ms=30_000,
                rebalance_timeout_ms=30_000, client_id="app")
    first = client.join_group(member_id="", **join).result(30)
    joined = client.join_group(member_id=first.member_id, **join).result(30)
    assignment = encode_assignment(Assignment(partitions=(("orders", 0), ("orders", 1), ("orders", 2))))
    synced = client.sync_group(group_id=group, generation_id=joined.generation_id, member_id=joined.member_id,
                               assignments={joined.member_id: assignment}).result(30)
    assert synced.error is Errors.NONE
    return joined.generation_id, joined.member_id


def _offsets(client, group="g"):
    return {tp: po.offset for tp, po in client.fetch_offsets(group_id=group).result(30).offsets.items()}


def test_groups_offsets_and_status_commands(cluster):
    cluster.create_topic("orders", 3)
    client = cluster.client()
    gen, member = _stable_member(client)
    commits = {("orders", 0): (40, ""), ("orders", 1): (100, "")}
    assert set(client.commit_offsets(group_id="g", offsets=commits, generation_id=gen,
                                     member_id=member).result(30).errors.values()) == {Errors.NONE}
    client.commit_offsets(group_id="idle", offsets={("orders", 2): (5, "")}).result(30)

    code, out, _ = _cli(cluster, "groups", "list", "--json")
    assert code == 0 and json.loads(out) == [{"group": "g", "state": "Stable", "protocol_type": "consumer"},
                                             {"group": "idle", "state": "Empty", "protocol_type": ""}]
    code, out, _ = _cli(cluster, "groups", "list", "--state", "stable")
    assert code == 0 and "g" in out.split() and "idle" not in out

    code, out, _ = _cli(cluster, "groups", "describe", "g", "--source", "tests.ray.test_ray_cli:SOURCE", "--json")
    (described,) = json.loads(out)
    assert code == 0 and described["state"] == "Stable"
    assert [(o["partition"], o["current_offset"], o["log_end_offset"], o["lag"], o["member_id"])
            for o in described["offsets"]] == [(0, 40, 100, 60, member), (1, 100, 100, 0, member),
                                               (2, None, 100, None, member)]
    code, out, _ = _cli(cluster, "groups", "describe", "g", "--source", "tests.ray.test_ray_cli:SOURCE")
    assert code == 0 and "LOG-END-OFFSET" in out and member in out and " 60 " in out
    code, out, _ = _cli(cluster, "groups", "describe", "g", "--members")
    assert code == 0 and member in out and "#PARTITIONS" in out
    code, out, _ = _cli(cluster, "groups", "describe", "g", "--state")
    assert code == 0 and "Stable" in out and "range" in out

    # Bad input: one sentence, exit 1, nothing changed.
    before = _offsets(client)
    for args, message in [
        (("groups", "describe", "ghost"), "consumer group 'ghost' does not exist"),
        (("offsets", "reset", "g", "--topic", "orders", "--to-offset", "3", "--execute"),
         "can only be reset if the group 'g' is inactive, but the current state is Stable"),
        (("offsets", "reset", "g", "--topic", "orders:x", "--to-offset", "3", "--execute"), "partition 'x'"),
        (("offsets", "reset", "g", "--topic", "orders", "--to-offset", "-3", "--execute"), "must be >= 0, got -3"),
        (("offsets", "reset", "ghost", "--topic", "orders", "--to-earliest", "--execute"), "'ghost' does not exist"),
        (("offsets", "delete", "ghost", "--topic", "orders"), "'ghost' does not exist"),
    ]:
        code, out, err = _cli(cluster, *args)
        assert code == 1 and err.startswith("error: ") and message in err and err.count("\n") == 1, (args, out, err)
    code, _, err = _cli(cluster, "offsets", "reset", "g", "--topic", "orders", "--to-offset", "1", "--shift-by", "1")
    assert code == 2 and "choose exactly one" in err
    assert _offsets(client) == before

    assert client.leave_group(group_id="g", members=[(member, None)]).result(30).members[0].error is Errors.NONE
    code, out, _ = _cli(cluster, "offsets", "reset", "g", "--topic", "orders:0,1", "--shift-by", "-30", "--dry-run",
                        "--json")
    assert code == 0 and json.loads(out)["partitions"] == [
        {"topic": "orders", "partition": 0, "current_offset": 40, "new_offset": 10, "error": None},
        {"topic": "orders", "partition": 1, "current_offset": 100, "new_offset": 70, "error": None}]
    assert _offsets(client) == before
    code, out, _ = _cli(cluster, "offsets", "reset", "g", "--topic", "orders", "--to-latest", "--execute",
                        "--source", "tests.ray.test_ray_cli:SOURCE")
    assert code == 0 and "NEW-OFFSET" in out
    assert _offsets(client) == {("orders", p): 100 for p in range(3)}

    code, out, _ = _cli(cluster, "offsets", "delete", "g", "--topic", "orders:1")
    assert code == 0 and "Successful" in out
    assert _offsets(client) == {("orders", 0): 100, ("orders", 2): 100}

    code, out, err = _cli(cluster, "groups", "delete", "g", "ghost")
    assert code == 1 and "Deletion of group 'g': deleted" in out and "'ghost' failed: the group does not exist" in err
    assert _offsets(client) == {}

    code, out, _ = _cli(cluster, "status", "--json")
    status = json.loads(out)
    assert code == 0 and status["offline_partitions"] == [] and status["groups_by_state"] == {"Empty": 1}
    assert [p["shard_state"] for p in status["partitions"]] == ["ACTIVE"] * cluster.num_partitions
    assert all(p["pid"] and p["leader"] == "local" for p in status["partitions"])
    code, out, _ = _cli(cluster, "status")
    assert code == 0 and "every partition is online" in out

    # A partition without a serving shard makes status a failing health check.
    ray.kill(cluster.shard(1), no_restart=True)
    code, out, _ = _cli(cluster, "status", "--json")
    status = json.loads(out)
    assert code == 1 and status["offline_partitions"] == [1]


def test_commands_on_a_namespace_without_a_deployment_fail_in_one_sentence(ray_session):
    result = CliRunner().invoke(main, ["status", "--namespace", "no-such-deployment"])
    assert result.exit_code == 1 and result.stderr == "error: no raygroups deployment in namespace " \
                                                       "'no-such-deployment'\n"
