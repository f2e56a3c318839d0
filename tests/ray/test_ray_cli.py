"""The operator's commands (``raygroups groups|offsets|status``) against a running embedded default, through
click's runner in this process (the deployment found by ``--namespace``, as from any host of the cluster):
what each prints and exits with, that bad input is one sentence (one JSON object with ``--json``) with its
exit code and changes nothing, and that a deployment not answering within ``--timeout`` is exit 3."""

from __future__ import annotations

import itertools
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
from raygroups.coordinator.partitioning import partition_for

from raygroups import Errors, SyntheticSource
from raygroups.cli import main

pytestmark = pytest.mark.ray

SOURCE = SyntheticSource({"orders": 3}, records_per_partition=100)
SOURCE_SPEC = "tests.ray.test_ray_cli:SOURCE"


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

    # A partition without a serving shard makes status a failing health check: exit 4, unhealthy.
    ray.kill(cluster.shard(1), no_restart=True)
    code, out, _ = _cli(cluster, "status", "--json")
    status = json.loads(out)
    assert code == 4 and status["offline_partitions"] == [1]


def test_all_groups_verbose_members_the_new_reset_scenarios_export_and_timeouts(cluster, tmp_path):
    """The options of kafka-consumer-groups.sh added to the commands, each against the deployment, with bad
    input that exits with its code and changes nothing."""
    cluster.create_topic("orders", 3)
    cluster.create_topic("payments", 2)
    client = cluster.client()
    gen, member = _stable_member(client)
    commits = {("orders", 0): (40, ""), ("orders", 1): (100, "")}
    assert set(client.commit_offsets(group_id="g", offsets=commits, generation_id=gen,
                                     member_id=member).result(30).errors.values()) == {Errors.NONE}
    client.commit_offsets(group_id="idle", offsets={("orders", 2): (5, ""), ("payments", 1): (7, "")}).result(30)

    # groups describe --all-groups, and --members --verbose: Kafka's ASSIGNMENT column.
    code, out, _ = _cli(cluster, "groups", "describe", "--all-groups", "--json")
    g, idle = json.loads(out)
    assert code == 0 and (g["group"], g["state"], idle["group"], idle["state"]) == ("g", "Stable", "idle", "Empty")
    assert g["members"][0]["partitions"] == [["orders", 0], ["orders", 1], ["orders", 2]]
    assert [(o["topic"], o["partition"], o["current_offset"]) for o in idle["offsets"]] == [("orders", 2, 5),
                                                                                            ("payments", 1, 7)]
    code, out, _ = _cli(cluster, "groups", "describe", "--all-groups", "--members", "--verbose")
    assert code == 0 and "ASSIGNMENT" in out and f"{member} " in out and " orders(0,1,2)" in out
    assert "Consumer group 'idle' has no active members." in out
    code, out, _ = _cli(cluster, "groups", "describe", "g", "--members")
    assert code == 0 and "ASSIGNMENT" not in out and "orders(0,1,2)" not in out
    code, out, err = _cli(cluster, "groups", "describe", "g", "--all-groups")
    assert code == 2 and "name the groups (GROUP...) or give --all-groups, not both" in err

    # offsets reset --all-topics --to-current --export: Kafka's CSV of the plan, which --from-file reads back.
    code, out, err = _cli(cluster, "offsets", "reset", "idle", "--all-topics", "--to-current", "--export")
    assert code == 0 and out == "orders,2,5\npayments,1,7\n" and "dry run: nothing changed" in err
    plan = tmp_path / "plan.csv"
    plan.write_text(out.replace("orders,2,5", "orders,2,3"))

    # Bad input: its exit code, and nothing changed.
    before = {"g": _offsets(client, "g"), "idle": _offsets(client, "idle")}
    bad = tmp_path / "bad.csv"
    for text, message in [("orders,2,3\npayments,1,-7\n", f"--from-file {bad} line 2: offset -7 is negative"),
                          ("orders,5,3\n", "topic 'orders' has 3 partition(s) (0..2); partition 5 does not exist"),
                          ("nope,0,1\n", "topic 'nope' is not registered in this deployment"),
                          ("g,orders,2,3\n", f"--from-file {bad}: no offsets for group 'idle'")]:
        bad.write_text(text)
        code, out, err = _cli(cluster, "offsets", "reset", "idle", "--from-file", str(bad), "--execute")
        assert code == 1 and err.startswith("error: ") and message in err and err.count("\n") == 1, (text, err)
    for args, message in [
        (("--all-topics", "--by-duration", "P1D"), "--by-duration needs the topics' data: pass --source"),
        (("--all-topics", "--by-duration", "1 day", "--source", SOURCE_SPEC), "'1 day' is not an ISO-8601 duration"),
        (("--all-topics", "--to-current", "--source", "no_such_module_x:y"), "cannot import"),
    ]:
        code, _, err = _cli(cluster, "offsets", "reset", "idle", *args, "--execute")
        assert code == 1 and message in err, (args, err)
    code, out, err = _cli(cluster, "offsets", "reset", "g", "--all-topics", "--to-current", "--execute", "--json")
    assert code == 1 and err == "" and json.loads(out) == {
        "error": "assignments can only be reset if the group 'g' is inactive, but the current state is Stable",
        "exit_code": 1}
    for args, message in [(("--all-topics", "--to-current", "--timeout", "0"), "0 is not in the range x>=1"),
                          (("--from-file", str(plan), "--all-topics"), "--from-file takes its partitions from"),
                          (("--to-current",), "--topic TOPIC[:P,...] (repeatable) or --all-topics, got neither")]:
        code, out, err = _cli(cluster, "offsets", "reset", "idle", *args, "--execute")
        assert code == 2 and message in " ".join(err.split()), (args, err)
    code, out, _ = _cli(cluster, "offsets", "reset", "idle", "--to-current", "--execute", "--json")
    assert code == 2 and json.loads(out) == {
        "error": "name the partitions to reset: --topic TOPIC[:P,...] (repeatable) or --all-topics, got neither",
        "exit_code": 2}
    assert {"g": _offsets(client, "g"), "idle": _offsets(client, "idle")} == before

    code, out, _ = _cli(cluster, "offsets", "reset", "idle", "--from-file", str(plan), "--execute", "--json")
    assert code == 0 and [(r["topic"], r["partition"], r["current_offset"], r["new_offset"], r["error"])
                          for r in json.loads(out)["partitions"]] == [("orders", 2, 5, 3, "NONE"),
                                                                      ("payments", 1, 7, 7, "NONE")]
    assert _offsets(client, "idle") == {("orders", 2): 3, ("payments", 1): 7}

    # --by-duration: a day ago is before the source's records (the first offset); no time ago is past its last
    # record (the log end, as Kafka's offsetsForTimes answers nothing there).
    code, out, _ = _cli(cluster, "offsets", "reset", "idle", "--topic", "orders:2", "--by-duration", "P1D",
                        "--source", SOURCE_SPEC, "--dry-run", "--json")
    assert code == 0 and [(r["partition"], r["current_offset"], r["new_offset"])
                          for r in json.loads(out)["partitions"]] == [(2, 3, 0)]
    code, out, _ = _cli(cluster, "offsets", "reset", "idle", "--topic", "orders:2", "--by-duration", "PT0S",
                        "--source", SOURCE_SPEC, "--execute")
    assert code == 0 and "RESULT" in out
    assert _offsets(client, "idle") == {("orders", 2): 100, ("payments", 1): 7}

    # groups delete --all-groups: the group with a member stays (NON_EMPTY_GROUP, exit 1), the idle one goes.
    code, out, _ = _cli(cluster, "groups", "delete", "--all-groups", "--json")
    assert code == 1 and json.loads(out) == {"g": "NON_EMPTY_GROUP", "idle": "NONE"}
    assert _offsets(client, "idle") == {} and _offsets(client, "g") == before["g"]

    # A partition whose shard is gone never answers: --timeout bounds the wait, exit 3, nothing changed.
    lost = next(p for p in range(cluster.num_partitions) if p != partition_for("g", cluster.num_partitions))
    group = next(name for name in (f"lost-{i}" for i in itertools.count())
                 if partition_for(name, cluster.num_partitions) == lost)
    ray.kill(cluster.shard(lost), no_restart=True)
    code, out, err = _cli(cluster, "groups", "describe", group, "--timeout", "200", "--json")
    assert code == 3 and err == "" and json.loads(out) == {"error": "the deployment did not answer within 200 ms",
                                                           "exit_code": 3}
    code, out, err = _cli(cluster, "offsets", "reset", group, "--topic", "orders", "--to-earliest", "--execute",
                          "--timeout", "200")
    assert code == 3 and out == "" and err == "error: the deployment did not answer within 200 ms\n"
    code, out, _ = _cli(cluster, "status", "--json", "--timeout", "2000")
    assert code == 4 and json.loads(out)["offline_partitions"] == [lost]
    assert _offsets(client, "g") == before["g"]


def test_commands_on_a_namespace_without_a_deployment_are_unreachable(ray_session):
    result = CliRunner().invoke(main, ["status", "--namespace", "no-such-deployment"])
    assert result.exit_code == 3 and result.stderr == "error: no raygroups deployment in namespace " \
                                                       "'no-such-deployment'\n"
    result = CliRunner().invoke(main, ["groups", "list", "--namespace", "no-such-deployment", "--json"])
    assert result.exit_code == 3 and result.stderr == "" and json.loads(result.stdout) == {
        "error": "no raygroups deployment in namespace 'no-such-deployment'", "exit_code": 3}


def _kafka_cli(bootstrap, *args):
    result = CliRunner().invoke(main, [*args, "--bootstrap-server", bootstrap])
    return result.exit_code, result.stdout, result.stderr


def test_the_commands_through_the_kafka_protocol_answer_as_through_ray(cluster):
    """``--bootstrap-server``: the same commands through a gateway (Kafka's protocol, no Ray client), with the
    same answers; a listener nobody runs is unreachable (3), and the two ways in exclude each other (2)."""
    import raygroups.gateway

    cluster.create_topic("orders", 3)
    client = cluster.client()
    gen, member = _stable_member(client, "kg")
    assert set(client.commit_offsets(group_id="kg", offsets={("orders", 0): (40, ""), ("orders", 1): (7, "")},
                                     generation_id=gen, member_id=member).result(30).errors.values()) == {Errors.NONE}
    client.commit_offsets(group_id="kidle", offsets={("orders", 2): (5, ""), ("orders", 0): (9, "")}).result(30)
    gw = raygroups.gateway.start(cluster)
    try:
        bootstrap = gw.bootstrap_servers
        for args in (("groups", "list", "--json"), ("groups", "describe", "kg", "kidle", "--offsets", "--json"),
                     ("groups", "describe", "kg", "--members", "--json")):
            via_ray, via_kafka = _cli(cluster, *args), _kafka_cli(bootstrap, *args)
            assert via_ray[0] == via_kafka[0] == 0, (via_ray, via_kafka)
            ray_doc, kafka_doc = json.loads(via_ray[1]), json.loads(via_kafka[1])
            if args[1] == "describe":  # the coordinator: a partition's leader node vs the listener FindCoordinator names
                for d in ray_doc + kafka_doc:
                    d.pop("coordinator")
            assert kafka_doc == ray_doc, args
        code, out, _ = _kafka_cli(bootstrap, "groups", "describe", "kg", "--state")
        assert code == 0 and bootstrap.split(",")[0] in out  # the coordinator, as FindCoordinator names it

        code, out, _ = _kafka_cli(bootstrap, "offsets", "reset", "kidle", "--topic", "orders:0", "--shift-by", "-4",
                                  "--execute", "--json")
        assert code == 0 and [(r["partition"], r["new_offset"], r["error"]) for r in json.loads(out)["partitions"]] \
            == [(0, 5, "NONE")]
        code, out, _ = _kafka_cli(bootstrap, "offsets", "delete", "kidle", "--topic", "orders:2", "--json")
        assert code == 0 and json.loads(out)["partitions"] == [{"topic": "orders", "partition": 2, "error": "NONE"}]
        assert _offsets(client, "kidle") == {("orders", 0): 5}
        code, out, _ = _kafka_cli(bootstrap, "groups", "delete", "kg", "kidle", "--json")
        assert code == 1 and json.loads(out) == {"kg": "NON_EMPTY_GROUP", "kidle": "NONE"}

        # Bad input: one sentence, its exit code, nothing changed.
        code, out, _ = _kafka_cli("127.0.0.1:1", "groups", "list", "--json")
        assert code == 3 and "127.0.0.1:1" in json.loads(out)["error"]
        code, out, _ = _kafka_cli("no-port", "groups", "list", "--json")
        assert code == 2 and "no-port" in json.loads(out)["error"]  # usage
        code, _, err = _kafka_cli(bootstrap, "groups", "list", "--address", "auto")
        assert code == 2 and "--bootstrap-server excludes --address" in err
        result = CliRunner().invoke(main, ["status", "--bootstrap-server", bootstrap])
        assert result.exit_code == 2 and "No such option '--bootstrap-server'" in result.stderr  # status asks the controller
        assert _offsets(client, "kg") == {("orders", 0): 40, ("orders", 1): 7}
    finally:
        gw.stop()
