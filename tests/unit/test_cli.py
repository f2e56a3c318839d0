"""The ``raygroups`` command line without a cluster: usage errors exit 2, bad input exits 1 with one
sentence naming what is wrong -- before Ray is touched. (Deploying for real: tests/multinode/test_deploy.py.)"""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest
from click.testing import CliRunner

from raygroups.cli import main


def run(*args: str):
    return CliRunner().invoke(main, list(args))


def test_version_and_help():
    assert run("--version").output.startswith("raygroups, version ")
    result = run("deploy", "--help")
    assert result.exit_code == 0 and "--data-dir" in result.output and "--no-wait" in result.output


@pytest.mark.parametrize(("args", "message"), [
    ((), "Missing option '--data-dir'"),
    (("--data-dir", "/d", "--config", "min.insync.replicas"), "is not KEY=VALUE"),
    (("--data-dir", "/d", "--config", "min.insync.replicas=two"), "'two' is not an integer (nor true/false)"),
    (("--data-dir", "/d", "--partitions", "0"), "0 is not in the range 1<=x<=10000"),
])
def test_usage_errors_exit_2(args, message):
    result = run("deploy", *args)
    assert result.exit_code == 2 and message in result.output, result.output


@pytest.mark.parametrize(("args", "message"), [
    (("--config", "shard.standby.per.partition"), "is not KEY=VALUE"),
    (("--config", "no.such.property=1"), "unknown coordinator property 'no.such.property'"),
    (("--config", "shard.standby.per.partition=3"), "shard.standby.per.partition must be true or false, got int 3"),
    (("--config", "shard.standby.per.partition=true", "--address", "auto"), "applies to the embedded default only"),
    (("--config", "group.max.session.timeout.ms=5000"), "the workload's consumers use 10000 ms sessions"),
    (("--config", "group.consumer.min.session.timeout.ms=45000"),
     "group.consumer.session.timeout.ms must be in [group.consumer.min.session.timeout.ms (45000)"),
    (("--group-protocol", "eager"), "'eager' is not one of 'classic', 'consumer', 'mixed'"),
    (("--compaction-every", "soon"), "Invalid value for --compaction-every: 'soon' is not a duration"),
    (("--compaction-every", "0.5s"), "'0.5s' must be between 1 s and 7 days"),
    (("--faults", "compaction-kill"), "fault 'compaction-kill' needs compaction rounds during the run"),
])
def test_chaos_run_config_errors_exit_2_before_anything_starts(args, message):
    result = run("chaos", "run", "--seconds", "1", *args)
    assert result.exit_code == 2 and message in result.output, result.output


@pytest.mark.parametrize(("args", "message"), [
    (("--data-dir", "relative/dir"), "data_dir must be an absolute path"),
    (("--data-dir", "/d", "--config", "group.max.size=0"), "group.max.size must be in [1, 2147483647], got 0"),
    (("--data-dir", "/d", "--config", "no.such.property=1"), "unknown coordinator property 'no.such.property'"),
    (("--data-dir", "/d", "--config", "offsets.topic.replication.factor=1"),
     "min.insync.replicas (2) must not exceed offsets.topic.replication.factor (1)"),
    (("--data-dir", "/d", "--listeners", "9092"), "a listener address must be HOST:PORT, got '9092'"),
    (("--data-dir", "/d", "--listeners", "0.0.0.0:70000"), "the port of listener address '0.0.0.0:70000' must be"),
    (("--data-dir", "/d", "--listeners", "198.18.0.11:9092"), "listeners host '198.18.0.11' is one machine's address"),
    (("--data-dir", "/d", "--listeners", "kafka.example:9092"), "HOST must be a wildcard (0.0.0.0 or ::) or a loopback"),
    (("--data-dir", "/d", "--source", "tests.unit.test_cli:run"), "advertised_host and source need listeners"),
    (("--data-dir", "/d", "--listeners", ":9092", "--source", "no_such_module_x:y"),
     "cannot import the source module 'no_such_module_x'"),
    (("--data-dir", "/d", "--listeners", ":9092", "--source", "raygroups.sources:SyntheticSource", "--no-wait"),
     "source needs wait=True"),
])
def test_bad_input_exits_1_with_one_sentence_and_touches_nothing(args, message, monkeypatch):
    import ray

    # Another test module of the same session may already run a Ray: what matters is that this command
    # never connects to one, so every connection attempt is recorded.
    connections = []
    monkeypatch.setattr(ray, "init", lambda *a, **k: connections.append((a, k)))
    result = run("deploy", "--address", "198.18.0.254:6379", *args)
    assert result.exit_code == 1 and message in result.stderr, result.output
    assert result.stderr.startswith("error: ") and result.stderr.count("\n") == 1
    assert connections == []


def test_python_dash_m_runs_the_same_command_line():
    done = subprocess.run([sys.executable, "-m", "raygroups", "deploy", "--help"], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0 and "Create, or resume, a replicated deployment" in done.stdout


def test_compact_usage_and_a_missing_java_is_one_sentence(monkeypatch):
    assert "--storage-uri" in run("compact", "--help").output
    result = run("compact", "--partitions", "0,x")
    assert result.exit_code == 2 and "is not a comma-separated list of partition numbers" in result.output
    monkeypatch.setenv("JAVA_HOME", "/nonexistent-java-home")
    result = run("compact", "--local")
    assert result.exit_code == 1
    assert result.output.strip().splitlines() == [
        "error: the Spark compaction job needs Java 17 or newer, and no 'java' was found (install a JDK, "
        "e.g. 'apt-get install openjdk-17-jdk-headless', or set JAVA_HOME)"]


@pytest.mark.parametrize(("args", "message"), [
    (["--every", "soon"], "'soon' is not a duration (e.g. 30s, 10m, 1h)"),
    (["--every", "0.5s"], "'0.5s' must be between 1 s and 7 days"),
    (["--every", "8d"], "'8d' must be between 1 s and 7 days"),
    (["--every", "10m", "--local"], "--every watches a deployment; --local is a one-off demonstration"),
    (["--rounds", "2"], "--rounds needs --every"),
    (["--every", "10m", "--min-dirty-ratio", "1.5"], "1.5 is not in the range 0.0<=x<=1.0"),
    (["--every", "10m", "--round-timeout", "never"], "Invalid value for --round-timeout: 'never' is not a duration"),
])
def test_compact_watch_mode_usage_errors_exit_2(args, message):
    result = run("compact", *args)
    assert result.exit_code == 2, result.output
    assert message in " ".join(result.output.split()), result.output


def test_every_accepts_kafka_style_durations():
    from raygroups.cli.compact import parse_every

    assert [parse_every(v) for v in ("90", "30s", "10m", "1h", "1d", "1500ms")] == [90, 30, 600, 3600, 86400, 1.5]
    assert parse_every(None) is None


def test_config_values_are_integers_or_kafkas_true_false():
    from raygroups.cli.common import parse_config

    assert parse_config(("min.insync.replicas=2", "unclean.leader.election.enable=TRUE")) == {
        "min.insync.replicas": 2, "unclean.leader.election.enable": True}
    assert parse_config(("unclean.leader.election.enable = false",)) == {"unclean.leader.election.enable": False}


@pytest.mark.parametrize(("args", "code", "message"), [
    ((), 2, "Missing option '--listen'"),
    (("--listen", "nope"), 2, "a listener address must be HOST:PORT, got 'nope'"),
    (("--listen", "127.0.0.1:99999"), 2, "must be 0..65535"),
    (("--listen", "127.0.0.1:0", "--source", "nocolon"), 1, "a source 'nocolon' must be MODULE:ATTR"),
    (("--listen", "127.0.0.1:0", "--source", "os:getcwd"), 1, "os:getcwd is a str, not a raygroups.Source"),
    (("--listen", "127.0.0.1:0", "--source", "os:open"), 1, "os:open() failed: TypeError"),
])
def test_gateway_command_refuses_bad_arguments_before_connecting(args, code, message, monkeypatch):
    import ray

    connections = []
    monkeypatch.setattr(ray, "init", lambda *a, **k: connections.append((a, k)))
    result = run("gateway", "--address", "198.18.0.254:6379", *args)
    assert result.exit_code == code and message in result.output, result.output
    assert connections == []


def test_a_watch_round_that_fails_is_reported_and_the_watch_goes_on(monkeypatch, capsys):
    """``raygroups compact --every``: a round that fails (here the Ray connection lost under it, as when the
    head restarts) is one line of the output, and the next round runs; the exit code is the last round's."""
    from raygroups.cli import compact
    from raygroups.compaction import CompactionReport

    answers = [ConnectionError("the GCS at 127.0.0.1:6379 did not answer"),
               CompactionReport([{"partition": 0, "ok": True}], snapshot_path="s", run_id="r2")]

    def one_round(*args, **kwargs):
        answer = answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    monkeypatch.setattr(compact, "_run_with_progress", one_round)
    monkeypatch.setattr(compact.time, "sleep", lambda s: None)
    assert compact.watch_rounds(None, None, None, True, False, 1.0, 0.5, 2) == 0
    first, second = capsys.readouterr().out.strip().splitlines()
    assert first == '{"ok": false, "error": "ConnectionError: the GCS at 127.0.0.1:6379 did not answer"}'
    assert '"run_id": "r2"' in second and '"ok": true' in second
    answers[:] = [CompactionReport([{"partition": 0, "ok": True}], snapshot_path="s"), RuntimeError("lost")]
    assert compact.watch_rounds(None, None, None, True, False, 1.0, 0.5, 2) == 1  # the last round failed


def test_a_watch_round_stuck_past_its_timeout_and_the_cancel_exits_for_its_supervisor(monkeypatch, capsys):
    """A round that goes on after ``--round-timeout`` cancelled its Spark jobs waits where no cancel reaches (the
    hour-long chaos run found a watch silent for 45 minutes): one sentence, and exit code 1 for the supervisor to
    start the watch again. A round that ends in time leaves no timer behind."""
    import threading

    from raygroups.cli import compact
    from raygroups.compaction import CompactionReport

    exited, released = [], threading.Event()

    def stuck_round(*args, **kwargs):
        if not released.wait(30):
            raise AssertionError("the watchdog never fired")
        raise TimeoutError("the Spark session never started")

    def exit_(code):
        exited.append(code)
        released.set()

    monkeypatch.setattr(compact, "_run_with_progress", stuck_round)
    monkeypatch.setattr(compact, "_exit", exit_)
    monkeypatch.setattr(compact, "STUCK_GRACE_S", 0.05)
    assert compact.watch_rounds(None, None, None, True, False, 1.0, 0.5, 1, round_timeout_s=0.05) == 1
    assert exited == [1]
    out = capsys.readouterr()
    assert '"error": "round 1 still running 0.1 s after it started, 0.05 s past --round-timeout' in out.out
    assert "exiting for the supervisor to start the watch again" in out.err

    monkeypatch.setattr(compact, "_run_with_progress",
                        lambda *a, **k: CompactionReport([{"partition": 0, "ok": True}], snapshot_path="s"))
    assert compact.watch_rounds(None, None, None, True, False, 1.0, 0.5, 1, round_timeout_s=0.2) == 0
    released.clear()
    assert not released.wait(0.4) and exited == [1]  # its timers were cancelled with the round


# --- raygroups groups|offsets|status without a deployment: parsing, usage, exit codes -----------------------
@pytest.mark.parametrize(("text", "ms"), [
    ("P1DT2H", 93_600_000), ("PT30M", 1_800_000), ("PT0.5S", 500), ("pt1,25s", 1_250), ("P2D", 172_800_000),
    ("PT1H30M15S", 5_415_000), ("P0D", 0), ("P36500D", 36_500 * 86_400_000),
])
def test_by_duration_reads_isos_durations_as_java(text, ms):
    from raygroups.cli.groups import parse_duration_ms

    assert parse_duration_ms(text) == ms


@pytest.mark.parametrize(("text", "message"), [
    ("", "'' is not an ISO-8601 duration PnDTnHnMnS"), ("P", "'P' is not an ISO-8601"), ("PT", "'PT' is not"),
    ("P1DT", "'P1DT' is not"), ("1h", "'1h' is not"), ("P1W", "'P1W' is not"), ("P1M", "'P1M' is not"),
    ("-PT1H", "'-PT1H' must not be negative (it is how far back from now)"), ("PT-1H", "must not be negative"),
    ("P36501D", "'P36501D' is 3153686400000 ms; it must be at most P36500D (3153600000000 ms)"),
])
def test_bad_durations_name_the_format_and_the_limit(text, message):
    from raygroups.admin import AdminError
    from raygroups.cli.groups import parse_duration_ms

    with pytest.raises(AdminError, match=re.escape(message)):
        parse_duration_ms(text)


def test_the_export_csv_reads_back_and_kafkas_group_format_keeps_the_groups_lines():
    from raygroups.cli.groups import offsets_csv, parse_offsets_csv

    plan = [{"topic": "orders", "partition": 0, "new_offset": 10}, {"topic": "orders", "partition": 2, "new_offset": 0}]
    assert offsets_csv(plan) == "orders,0,10\norders,2,0\n"
    assert parse_offsets_csv(offsets_csv(plan), "g") == (("orders", 0, 10), ("orders", 2, 0))
    text = "g,orders,1,7\r\nother,orders,1,99\n\n g , payments , 0 , 3 \n"
    assert parse_offsets_csv(text, "g") == (("orders", 1, 7), ("payments", 0, 3))


@pytest.mark.parametrize(("text", "message"), [
    ("", "F: the file has no offsets (expected topic,partition,offset lines, as --export writes)"),
    ("orders,0,1\norders,1\n", "F line 2: expected topic,partition,offset (or group,topic,partition,offset), got 2"),
    ("orders,0,1\ng,orders,1,2\n", "F line 2: 4 fields, but the first line has 3 (one format per file)"),
    ("orders,0,1\n\norders,1,-5\n", "F line 3: offset -5 is negative; it must be 0..9223372036854775807"),
    ("orders,x,1\n", "F line 1: partition 'x' is not a whole number (0..2147483647)"),
    ("orders,2147483648,1\n", "F line 1: partition 2147483648 is larger than 2147483647"),
    ("orders,0,9223372036854775808\n", "F line 1: offset 9223372036854775808 is larger than 9223372036854775807"),
    (",0,1\n", "F line 1: a topic name must be 1..249 characters, got 0"),
    ("orders,0,1\norders,0,2\n", "F line 2: orders:0 is already on line 1"),
    ("other,orders,0,1\nthird,orders,0,1\n", "F: no offsets for group 'g' (the file's lines are for 'other', 'third')"),
    ("topic,partition,offset\n", "F line 1: partition 'partition' is not a whole number"),
])
def test_bad_reset_files_name_the_line_and_the_limit(text, message):
    from raygroups.admin import AdminError
    from raygroups.cli.groups import parse_offsets_csv

    with pytest.raises(AdminError, match=re.escape(message)):
        parse_offsets_csv(text, "g", "F")


def test_the_assignment_column_is_kafkas():
    from raygroups.cli.groups import assignment_cell

    assert assignment_cell([["payments", 2], ["orders", 1], ["orders", 0]]) == "orders(0,1), payments(2)"
    assert assignment_cell([]) == "-"


def test_exit_codes_are_one_registry_and_the_readme_lists_them():
    from pathlib import Path

    from raygroups.cli.common import ExitCode

    assert [(c.name, int(c)) for c in ExitCode] == [("OK", 0), ("ERROR", 1), ("USAGE", 2), ("UNREACHABLE", 3),
                                                    ("UNHEALTHY", 4)]
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    for code in ExitCode:
        assert re.search(rf"^\| {int(code)} \| {code.name.lower()}", readme, re.M), code


@pytest.fixture
def no_deployment(monkeypatch):
    """The operator's commands never reach a deployment here: each attempt is recorded."""
    from raygroups.cli import groups

    connections = []
    monkeypatch.setattr(groups, "_connect", lambda *a: connections.append(a))
    return connections


@pytest.mark.parametrize(("args", "message"), [
    (("groups", "describe"), "name the groups (GROUP...) or give --all-groups, got neither"),
    (("groups", "describe", "g", "--all-groups"), "name the groups (GROUP...) or give --all-groups, not both"),
    (("groups", "delete"), "got neither"),
    (("groups", "delete", "g", "--all-groups"), "not both"),
    (("offsets", "reset", "g", "--to-earliest"), "--topic TOPIC[:P,...] (repeatable) or --all-topics, got neither"),
    (("offsets", "reset", "g", "--to-earliest", "--topic", "t", "--all-topics"), "or --all-topics, not both"),
    (("offsets", "reset", "g", "--from-file", "f.csv", "--topic", "t"), "--from-file takes its partitions from"),
    (("offsets", "reset", "g", "--all-topics", "--to-current", "--by-duration", "PT1H"),
     "choose exactly one of --to-earliest, --to-latest, --to-current, --to-offset, --shift-by, --to-datetime, "
     "--by-duration, --from-file (got --to-current, --by-duration)"),
    (("offsets", "reset", "g", "--all-topics", "--to-current", "--export", "--json"), "--export and --json exclude"),
    (("status", "--timeout", "0"), "0 is not in the range x>=1"),
])
def test_usage_errors_of_the_operators_commands_exit_2(args, message, no_deployment):
    result = run(*args)
    assert result.exit_code == 2 and message in " ".join(result.output.split()), result.output
    assert no_deployment == []


def test_with_json_a_failure_is_one_json_object_on_stdout(no_deployment, tmp_path):
    result = run("groups", "describe", "--json")
    assert result.exit_code == 2 and result.stderr == ""
    assert json.loads(result.stdout) == {"error": "name the groups (GROUP...) or give --all-groups, got neither",
                                         "exit_code": 2}
    plan = tmp_path / "plan.csv"
    plan.write_text("orders,0,10\norders,1,-1\n")
    result = run("offsets", "reset", "g", "--from-file", str(plan), "--json")
    assert result.exit_code == 1 and result.stderr == ""
    assert json.loads(result.stdout) == {
        "error": f"--from-file {plan} line 2: offset -1 is negative; it must be 0..9223372036854775807", "exit_code": 1}
    result = run("offsets", "reset", "g", "--from-file", str(plan))
    assert result.exit_code == 1 and result.stdout == "" and result.stderr.startswith(f"error: --from-file {plan} ")
    assert no_deployment == []


@pytest.mark.parametrize(("args", "message"), [
    (("--by-duration", "P1X"), "--by-duration 'P1X' is not an ISO-8601 duration PnDTnHnMnS"),
    (("--from-file", "/nonexistent/plan.csv"), "--from-file /nonexistent/plan.csv: no such file or directory"),
    (("--to-datetime", "yesterday"), "--to-datetime 'yesterday' is not an ISO date-time"),
    (("--to-offset", "-1"), "--to-offset must be >= 0, got -1"),
])
def test_bad_reset_values_exit_1_before_connecting(args, message, no_deployment):
    scope = () if args[0] == "--from-file" else ("--all-topics",)
    result = run("offsets", "reset", "g", *scope, *args, "--execute")
    assert result.exit_code == 1 and result.stderr.startswith(f"error: {message}"), result.output
    assert result.stderr.count("\n") == 1 and no_deployment == []


def test_no_ray_at_the_address_is_unreachable_exit_3(monkeypatch):
    import raygroups.cli as cli
    from raygroups.cli import groups

    def refuse(address):
        raise ConnectionError(f"could not connect to a Ray cluster at {address}")

    monkeypatch.setattr(groups, "init_ray", refuse)
    monkeypatch.setattr(cli, "init_ray", refuse)
    result = run("status", "--address", "198.18.0.254:6379")
    assert result.exit_code == 3 and result.stderr == "error: could not connect to a Ray cluster at 198.18.0.254:6379\n"
    result = run("groups", "list", "--address", "198.18.0.254:6379", "--json")
    assert result.exit_code == 3 and json.loads(result.stdout) == {
        "error": "could not connect to a Ray cluster at 198.18.0.254:6379", "exit_code": 3}
    result = run("deploy", "--address", "198.18.0.254:6379", "--data-dir", "/d", "--json")
    assert result.exit_code == 3 and json.loads(result.stdout)["exit_code"] == 3


def test_a_ray_cluster_that_refuses_this_clients_token_is_one_sentence_and_unreachable(monkeypatch):
    """Ray's token authentication: a cluster started with RAY_AUTH_MODE=token refuses a client without its
    token (ray.init raises AuthenticationError after its core's retries); the command says what to do."""
    import ray

    def refuse(**_kwargs):
        raise ray.exceptions.AuthenticationError("InvalidAuthToken: no token")

    monkeypatch.setattr(ray, "init", refuse)
    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    monkeypatch.delenv("RAY_AUTH_MODE", raising=False)
    result = run("gateway", "--listen", "127.0.0.1:0", "--address", "198.18.0.254:6379")
    assert result.exit_code == 3 and result.stderr == (
        "error: the Ray cluster at 198.18.0.254:6379 requires token authentication: set RAY_AUTH_MODE=token and "
        "give this client the cluster's token (~/.ray/auth_token, RAY_AUTH_TOKEN_PATH or RAY_AUTH_TOKEN)\n")
    monkeypatch.setenv("RAY_AUTH_MODE", "token")
    result = run("groups", "list", "--address", "198.18.0.254:6379", "--json")
    assert result.exit_code == 3 and json.loads(result.stdout)["error"].startswith(
        "the Ray cluster at 198.18.0.254:6379 refused this client's token")
