"""The ``raygroups`` command line without a cluster: usage errors exit 2, bad input exits 1 with one
sentence naming what is wrong -- before Ray is touched. (Deploying for real: tests/multinode/test_deploy.py.)"""

from __future__ import annotations

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
