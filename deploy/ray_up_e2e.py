"""``ray up cluster.yaml`` end to end on four real SSH hosts built on this machine (``deploy/testhosts.py``):
a head and three coordinator nodes. Root only; about ten minutes here.

1. the hosts come up (network, PID, mount and UTS namespaces, sshd each); the project's wheel is built;
2. ``ray up`` with a copy of the project's ``cluster.yaml`` in which only the addresses, the SSH user and
   the key are substituted; its setup installs every dependency as the wheel's ``constraints.txt`` pins
   it, and every node is checked to run exactly those versions; every Ray process and client speaks TLS
   with a certificate ``scripts/ray_tls.sh`` made for the hosts (a client without it is refused); its start commands end with
   ``raygroups deploy``, so it leaves a running replicated deployment;
3. through Ray client from this machine (``raygroups.connect("ray://<head>:10001")``, token auth): the demo
   workload -- a ``ConsumerGroup`` of consumer actors works through a synthetic topic and commits as it
   goes -- plus plain commits of many groups; every committed offset is checked; the operator's commands
   (``raygroups status``, ``groups list``, ``groups describe``, ``offsets reset``, ``offsets delete``,
   ``groups delete``) run against it with ``--address ray://...``;
4. a confluent-kafka (librdkafka) consumer group of two members on this machine commits through the
   hosts' Kafka listeners (cluster.yaml's ``--listeners``) throughout; the coordinator host that leads the
   most partitions is powered off: the partitions fail over, every committed offset is still there and new
   commits succeed, the Kafka group's included; the host is powered on again and rejoins under its name
   (Ray's autoscaler restarts Ray on it), back in the in-sync replicas;
5. the head powered off for 60 s while a second Kafka group commits (GCS fault tolerance: the coordinator
   hosts keep serving it), powered on, its Ray started again with cluster.yaml's ``ray start --head`` (the
   GCS kept on its disk): every committed offset is there, the group committed while the head was off,
   and its longest pause between two commits is reported;
6. ``ray down`` (and ``ray stop`` on each worker: ``ray down`` stops only the head), then ``ray up`` again:
   the deployment is resumed from the coordinator nodes' disks and every committed offset is back;
7. ``ray down`` and a teardown that must leave no process, namespace or link behind.

Every step's duration goes to ``--out`` (``run.log`` and ``timings.json``); the run fails at the first
step that does not hold. ``python deploy/ray_up_e2e.py [--out bench/results/ray-up] [--keep]``.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
import tomllib
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import testhosts  # noqa: E402
from testhosts import HEAD, KEY, WORK, WORKERS  # noqa: E402

from raygroups.deployment.versions import mismatches, parse_constraints, parse_freeze  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
CONSTRAINTS = ROOT / "raygroups" / "constraints.txt"
CLIENT_ADDRESS = f"ray://{HEAD.ip}:10001"
NAMESPACE = "raygroups"
PREBAKED_VENV = Path("/root/raygroups-venv")
KAFKA_PORT = 9092


class Run:
    def __init__(self, out: Path) -> None:
        self.out = out
        out.mkdir(parents=True, exist_ok=True)
        self.log = open(out / "run.log", "w", encoding="utf-8")
        self.timings: dict[str, float] = {}
        self.facts: dict[str, object] = {}
        self.t0 = time.monotonic()

    def say(self, text: str) -> None:
        line = f"[{time.monotonic() - self.t0:7.1f}s] {text}"
        print(line, flush=True)
        self.log.write(line + "\n")
        self.log.flush()

    def step(self, name: str, fn, *args):
        self.say(f"{name} ...")
        started = time.monotonic()
        result = fn(*args)
        self.timings[name] = round(time.monotonic() - started, 1)
        self.say(f"{name}: done in {self.timings[name]} s")
        return result

    def save(self, ok: bool) -> None:
        (self.out / "timings.json").write_text(json.dumps({"ok": ok, "seconds": self.timings, "facts": self.facts,
                                                           "total_s": round(time.monotonic() - self.t0, 1)},
                                                          indent=2, sort_keys=True))


def launcher_env() -> dict[str, str]:
    """What ``ray up``/``ray down`` and the Ray client need on this machine (Ray's pitfalls on the local
    provider: the v1 autoscaler, launcher files out of any local Ray's temp dir, token mode for clients)."""
    tmp = WORK / "launcher-tmp"
    tmp.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, TMPDIR=str(tmp), RAY_UP_enable_autoscaler_v2="0", RAY_USAGE_STATS_ENABLED="0",
               RAY_AUTH_MODE="token", **tls_env())
    env["PATH"] = f"{Path(sys.executable).parent}:{env['PATH']}"
    return env


TLS_DIR = Path.home() / ".ray" / "raygroups-tls"


def tls_env() -> dict[str, str]:
    """Ray's TLS on this machine's clients, with the cluster's certificate (scripts/ray_tls.sh)."""
    cluster = TLS_DIR / "cluster"
    return {"RAY_USE_TLS": "1", "RAY_TLS_SERVER_CERT": str(cluster / "node.crt"),
            "RAY_TLS_SERVER_KEY": str(cluster / "node.key"), "RAY_TLS_CA_CERT": str(cluster / "ca.crt")}


def plaintext_refused() -> dict:
    """A Ray client without TLS (the token alone) does not get in: the command fails or hangs, no answer."""
    env = {k: v for k, v in launcher_env().items() if not k.startswith("RAY_TLS") and k != "RAY_USE_TLS"}
    started = time.monotonic()
    try:
        done = subprocess.run([str(Path(sys.executable).parent / "raygroups"), "groups", "list", "--address",
                               CLIENT_ADDRESS, "--json"], env=env, capture_output=True, text=True, timeout=90)
        outcome = f"exit {done.returncode}"
        if done.returncode == 0:
            raise RuntimeError(f"a client without TLS was answered: {done.stdout.strip()[:300]}")
    except subprocess.TimeoutExpired:
        outcome = "no answer in 90 s"
    return {"plaintext_client": outcome, "seconds": round(time.monotonic() - started, 1)}


def make_tls_certificate() -> None:
    """What the operator runs before `ray up` (cluster.yaml's step 3): the certificate for every host."""
    subprocess.run(["sh", str(ROOT / "scripts" / "ray_tls.sh"), HEAD.ip, *(w.ip for w in WORKERS)], check=True,
                   capture_output=True)


def ray_cli(run: Run, *args: str, timeout_s: float = 900) -> None:
    done = subprocess.run(["ray", *args], cwd=ROOT, env=launcher_env(), capture_output=True, text=True,
                          timeout=timeout_s, stdin=subprocess.DEVNULL)
    (run.out / f"ray-{args[0]}-{len(run.timings)}.log").write_text(done.stdout + done.stderr)
    if done.returncode != 0:
        raise RuntimeError(f"ray {' '.join(args)} failed ({done.returncode}); its output is in {run.out}")


# --- preparation ---------------------------------------------------------------------------------------
def build_wheel() -> Path:
    dist = WORK / "dist"
    dist.mkdir(parents=True, exist_ok=True)
    for old in dist.glob("*.whl"):
        old.unlink()
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "--wheel-dir",
                    str(dist), str(ROOT)], check=True, capture_output=True)
    (wheel,) = dist.glob("raygroups-*.whl")
    return wheel


def prebake_venv() -> None:
    """A venv with the pinned dependencies in this machine's /root, which every host's home overlays: the
    setup commands of cluster.yaml then find them installed, as on a prepared machine image (they still
    run: venv, pip, the wheel's reinstall)."""
    if (PREBAKED_VENV / "bin" / "ray").exists():
        return
    subprocess.run(["python3.11", "-m", "venv", str(PREBAKED_VENV)], check=True)
    pins = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    subprocess.run([str(PREBAKED_VENV / "bin" / "python"), "-m", "pip", "install", "-q", "-c", str(CONSTRAINTS),
                    *pins], check=True)


def check_node_versions() -> dict:
    """Every host's raygroups venv runs each package of the wheel's constraints.txt at its pinned version
    (cluster.yaml's setup installs from it); a difference fails the run, naming the host and the package."""
    wanted = parse_constraints(CONSTRAINTS.read_text())
    wrong = {}
    for h in (HEAD, *WORKERS):
        installed = parse_freeze(testhosts.ssh(h, "~/raygroups-venv/bin/python -m pip freeze --all", True, 300).stdout)
        if problems := mismatches(wanted, installed):
            wrong[h.name] = problems
    if wrong:
        raise RuntimeError(f"nodes do not run what was tested (constraints.txt): {wrong}")
    return {"packages": len(wanted), "hosts": 1 + len(WORKERS), "ray": wanted["ray"]}


def cluster_copy(wheel: Path, partitions: int | None = None) -> Path:
    """The project's cluster.yaml with only the addresses, the SSH user and the key replaced, and the local
    paths of file_mounts made absolute (``ray up`` runs from the repository root in the README); with
    ``partitions``, ``raygroups deploy --partitions`` too."""
    text = (ROOT / "cluster.yaml").read_text()
    if partitions is not None:
        text, n = re.subn(r"--partitions=\d+", f"--partitions={partitions}", text)
        if n != 1:
            raise RuntimeError(f"cluster.yaml has {n} --partitions= flags, not 1")
    text = text.replace("HEAD_NODE_HOSTNAME", HEAD.ip)
    for i, w in enumerate(WORKERS, 1):
        text = text.replace(f"WORKER_NODE_HOSTNAME_{i}", w.ip)
    text = re.sub(r"(?m)^(\s*ssh_user:)\s*\S+", r"\1 root", text, count=1)
    text = re.sub(r"(?m)^(\s*ssh_private_key:)\s*\S+", rf"\1 {KEY}", text, count=1)
    text = text.replace(": dist", f": {wheel.parent}")
    leftover = re.findall(r"[A-Z_]*HOSTNAME[A-Z_0-9]*", text)
    if leftover:
        raise RuntimeError(f"cluster.yaml placeholders not substituted: {sorted(set(leftover))}")
    path = WORK / "cluster.yaml"
    path.write_text(text)
    return path


# --- checks through Ray client (each in a fresh process: one Ray client connection per process) ------
def client_phase(run: Run, phase: str, *args: str, timeout_s: float = 600) -> dict:
    log = run.out / f"phase-{phase}-{len(run.timings)}.log"
    try:
        done = subprocess.run([sys.executable, __file__, "--phase", phase, *args], env=launcher_env(),
                              capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired as e:  # what it printed until then says where it stood
        log.write_text(_text(e.stdout) + _text(e.stderr))
        raise
    log.write_text(done.stdout + done.stderr)
    lines = [ln for ln in done.stdout.splitlines() if ln.startswith("{")]
    if done.returncode != 0 or not lines:
        raise RuntimeError(f"phase {phase} failed ({done.returncode}): {done.stderr.strip()[-1500:]}")
    return json.loads(lines[-1])


def _text(output: bytes | str | None) -> str:
    return output.decode(errors="replace") if isinstance(output, bytes) else (output or "")


def operator_cli(run: Run, *args: str, via: str = "ray") -> tuple[int, object]:
    """``raygroups ARGS --json`` from this machine, as an operator would run it: through Ray client
    (``--address ray://<head>:10001``, ``via="ray"``) or through the Kafka protocol (``--bootstrap-server`` of
    the hosts' listeners, ``via="kafka"``); (exit code, parsed JSON), or (exit code, the sentence on stderr)
    for a command that failed. Each command's wall time goes to the run's ``cli_seconds`` fact."""
    way = ["--address", CLIENT_ADDRESS] if via == "ray" else ["--bootstrap-server", kafka_bootstrap()]
    started = time.monotonic()
    done = subprocess.run([str(Path(sys.executable).parent / "raygroups"), *args, *way, "--json"],
                          env=launcher_env(), capture_output=True, text=True, timeout=300)
    seconds = round(time.monotonic() - started, 2)
    command = " ".join(a for a in args[:2] if not a.startswith("-"))
    run.facts.setdefault("cli_seconds", {}).setdefault(via, {}).setdefault(command, []).append(seconds)
    (run.out / f"cli-{via}-{args[0]}-{args[1] if len(args) > 1 else ''}-{len(run.timings)}.log").write_text(
        done.stdout + done.stderr)
    try:
        return done.returncode, json.loads(done.stdout)
    except json.JSONDecodeError:
        if done.returncode != 0 and done.stderr.strip():
            return done.returncode, done.stderr.strip()
        raise RuntimeError(f"raygroups {' '.join(args)} printed no JSON ({done.returncode}): "
                           f"{done.stderr.strip()[-1000:]}") from None


def check_operator_view(run: Run, expect_offline: bool = False, host_down: bool = False) -> dict:
    """The operator's commands against the deployment: status (a health check), the groups, the demo group.
    ``host_down``: one of three coordinator hosts is off, so every partition has fewer in-sync replicas than
    the replication factor (whether or not the controller has moved the lost host's replicas yet)."""
    status_exit, status = operator_cli(run, "status")
    assert status_exit == (4 if expect_offline else 0), (status_exit, status["offline_partitions"])  # 4: unhealthy
    under = len(status["under_replicated_partitions"])
    assert under == (status["num_partitions"] if host_down else 0), status["under_replicated_partitions"]
    code, groups = operator_cli(run, "groups", "list")
    assert code == 0 and {g["group"] for g in groups} >= {"orders-app", "plain-0"}, groups
    code, described = operator_cli(run, "groups", "describe", "orders-app")
    assert code == 0 and {o["current_offset"] for o in described[0]["offsets"]} == {2_000}, described
    # The same through the Kafka protocol (the hosts' listeners), without Ray client's connection.
    code, kafka_groups = operator_cli(run, "groups", "list", via="kafka")
    assert code == 0 and kafka_groups == groups, (kafka_groups, groups)
    code, kafka_described = operator_cli(run, "groups", "describe", "orders-app", via="kafka")
    assert code == 0 and kafka_described[0]["offsets"] == described[0]["offsets"], kafka_described
    return {"status_exit": status_exit, "partitions": status["num_partitions"],
            "under_replicated": len(status["under_replicated_partitions"]), "groups": len(groups),
            "groups_by_state": status["groups_by_state"]}


def operator_writes(run: Run, expected_file: str) -> dict:
    """The operator's writing commands against the deployment (each on a group of its own), and the
    acknowledged offsets they leave, which the later checks then hold the deployment to: a reset
    previewed (nothing changes) then executed, one partition's offsets deleted, a group deleted, and
    bad input refused with exit 1."""
    expected = json.loads(Path(expected_file).read_text())
    code, preview = operator_cli(run, "offsets", "reset", "plain-0", "--topic", "orders", "--to-offset", "50",
                                 "--dry-run")
    assert code == 0 and {r["new_offset"] for r in preview["partitions"]} == {50}, preview
    code, described = operator_cli(run, "groups", "describe", "plain-0", "--offsets")
    assert code == 0 and {o["current_offset"] for o in described[0]["offsets"]} == {300}, described
    code, reset = operator_cli(run, "offsets", "reset", "plain-0", "--topic", "orders:0,1,2", "--to-offset", "50",
                               "--execute")
    assert code == 0 and len(reset["partitions"]) == 3, reset
    expected["plain-0"].update({f"orders:{p}": 50 for p in range(3)})
    code, shifted = operator_cli(run, "offsets", "reset", "plain-3", "--topic", "orders", "--shift-by", "-300",
                                 "--execute")
    assert code == 0, shifted
    expected["plain-3"] = {tp: o - 300 for tp, o in expected["plain-3"].items()}
    code, deleted = operator_cli(run, "offsets", "delete", "plain-1", "--topic", "orders:0")
    assert code == 0, deleted
    del expected["plain-1"]["orders:0"]
    code, gone = operator_cli(run, "groups", "delete", "plain-2")
    assert code == 0, gone
    expected["plain-2"] = {}
    refused = [operator_cli(run, *bad)[0] for bad in (
        ("offsets", "reset", "orders-app", "--topic", "orders", "--to-offset", "-5", "--execute"),
        ("offsets", "reset", "no-such-group", "--topic", "orders", "--to-earliest", "--execute"),
    )]
    assert refused == [1, 1], refused
    Path(expected_file).write_text(json.dumps(expected, sort_keys=True))
    return {"reset": 3, "shifted": len(expected["plain-3"]), "offsets_deleted": 1, "groups_deleted": 1,
            "refused": len(refused)}


def _wait(condition, timeout_s: float, what: str, interval_s: float = 1.0):
    deadline = time.monotonic() + timeout_s
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout_s:g} s waiting for {what}")
        time.sleep(interval_s)


def _connect():
    import logging

    import raygroups

    logging.getLogger("ray").setLevel(logging.ERROR)
    return _wait(lambda: _try_connect(raygroups), 300, "the deployment through Ray client", 2.0)


def _try_connect(raygroups):
    import ray

    try:
        if not ray.is_initialized():
            ray.init(address=CLIENT_ADDRESS, namespace=NAMESPACE, log_to_driver=False, logging_level="ERROR")
        return raygroups.connect(CLIENT_ADDRESS, NAMESPACE)
    except Exception as e:  # noqa: BLE001 - the head or the deployment is still coming up
        print(f"(connect: {type(e).__name__}: {str(e)[:200]})", file=sys.stderr)
        ray.shutdown()
        return None


def _serving(cluster, expect_nodes: int) -> dict | None:
    from raygroups import admin

    try:
        nodes = cluster.nodes()
        alive = sorted(n for n, i in nodes.items() if i["alive"])
        if len(alive) < expect_nodes:
            return None
        status = admin.status(cluster)
    except Exception as e:  # noqa: BLE001 - partitions still being placed
        print(f"(status: {type(e).__name__}: {str(e)[:200]})", file=sys.stderr)
        return None
    if status["offline_partitions"]:
        return None
    return {"alive": alive, "status": status}


def _all_offsets(cluster, groups: list[str]) -> dict[str, dict[str, int]]:
    client = cluster.client()
    futures = {g: client.fetch_offsets(group_id=g) for g in groups}
    return {g: {f"{t}:{p}": po.offset for (t, p), po in f.result(timeout=120).offsets.items()}
            for g, f in futures.items()}


def phase_workload(expected_file: str) -> dict:
    """The README's demo workload on the cluster, plus plain commits of 40 groups; records what was committed."""
    from raygroups import ConsumerGroup, SyntheticSource, VerifyingProcessor

    cluster = _connect()
    ready = _wait(lambda: _serving(cluster, 3), 600, "every partition served by 3 coordinator nodes", 2.0)
    source = SyntheticSource({"orders": 6}, records_per_partition=2_000)
    group = ConsumerGroup(VerifyingProcessor, cluster, "orders-app", ["orders"], source, num_consumers=2,
                          processor_args=(source,))
    started = time.monotonic()
    _wait(lambda: all(p["committed"] == 2_000 for p in group.stats()["partitions"]), 600,
          "the consumer group to commit every record", 2.0)
    consumed_s = time.monotonic() - started
    stats = group.stats()
    group.stop()
    invalid = sum(w.get("invalid", 0) for w in stats["retired"])
    client = cluster.client()
    groups = [f"plain-{i}" for i in range(40)]
    for round_ in range(1, 4):
        futures = [client.commit_offsets(group_id=g, offsets={("orders", p): (round_ * 100 + i, "") for p in range(6)})
                   for i, g in enumerate(groups)]
        refused = {g: {f"{t}:{p}": e.name for (t, p), e in f.result(timeout=120).errors.items() if e is not raygroups_none()}
                   for g, f in zip(groups, futures, strict=True)}
        refused = {g: errors for g, errors in refused.items() if errors}
        assert not refused, f"round {round_}: commits refused: {refused}"
    expected = _all_offsets(cluster, ["orders-app", *groups])
    assert expected["orders-app"] == {f"orders:{p}": 2_000 for p in range(6)}, expected["orders-app"]
    Path(expected_file).write_text(json.dumps(expected, sort_keys=True))
    return {"nodes": ready["alive"], "leaders": _leaders(ready["status"]), "consumed_s": round(consumed_s, 1),
            "invalid_records": invalid, "groups": len(expected),
            "offsets": sum(len(v) for v in expected.values())}


def raygroups_none():
    from raygroups import Errors

    return Errors.NONE


def _leaders(status: dict) -> dict[str, int]:
    counts: dict[str, int] = {}
    for p in status["partitions"]:
        counts[p["leader"]] = counts.get(p["leader"], 0) + 1
    return counts


def phase_check(expected_file: str, expect_nodes: str, absent: str = "") -> dict:
    """Wait until every partition is served (by ``expect_nodes`` alive coordinator nodes, none of them led by
    ``absent``), then compare every committed offset with what was acknowledged, then commit once more."""
    cluster = _connect()
    started = time.monotonic()

    def served():
        ready = _serving(cluster, int(expect_nodes))
        if ready and absent and any(p["leader"] == absent for p in ready["status"]["partitions"]):
            return None
        return ready

    ready = _wait(served, 600, "every partition served", 2.0)
    served_s = time.monotonic() - started
    expected = json.loads(Path(expected_file).read_text())
    actual = _all_offsets(cluster, sorted(expected))
    lost = {g: {tp: (o, actual.get(g, {}).get(tp)) for tp, o in offsets.items() if actual.get(g, {}).get(tp) != o}
            for g, offsets in expected.items()}
    lost = {g: d for g, d in lost.items() if d}
    if lost:
        return {"ok": False, "lost": lost}
    client = cluster.client()
    bumped = {g: {tp: o + 1 for tp, o in offsets.items()} for g, offsets in expected.items()
              if g.startswith("plain-") and offsets}  # not a group the operator deleted
    for g, offsets in bumped.items():
        errors = client.commit_offsets(group_id=g, offsets={(tp.split(":")[0], int(tp.split(":")[1])): (o, "")
                                                             for tp, o in offsets.items()}).result(timeout=120).errors
        assert set(errors.values()) == {raygroups_none()}, errors
    expected.update(bumped)
    Path(expected_file).write_text(json.dumps(expected, sort_keys=True))
    return {"ok": True, "nodes": ready["alive"], "served_after_s": round(served_s, 1),
            "leaders": _leaders(ready["status"]), "offsets_checked": sum(len(v) for v in expected.values()),
            "under_replicated": ready["status"]["under_replicated_partitions"]}


def phase_rejoined(name: str) -> dict:
    """Wait until ``name`` is alive under its name again and back in the ISR of every partition it holds."""
    cluster = _connect()
    started = time.monotonic()

    def back():
        info = cluster.nodes().get(name)
        if not info or not info["alive"]:
            return None
        meta = cluster.partition_metadata()
        held = [p for p, a in meta.items() if name in a["replicas"]]
        return held if held and all(name in meta[p]["isr"] for p in held) else None

    held = _wait(back, 600, f"{name} alive and in sync", 2.0)
    return {"node": name, "partitions_in_sync": len(held), "after_s": round(time.monotonic() - started, 1)}


def kafka_bootstrap() -> str:
    """Every coordinator host's Kafka listener (cluster.yaml's ``--listeners=0.0.0.0:9092``)."""
    return ",".join(f"{w.ip}:{KAFKA_PORT}" for w in WORKERS)


def phase_kafka_group(stop_file: str, out_file: str, group: str = "kafka-app") -> dict:
    """A confluent-kafka (librdkafka) consumer group of two members on this machine, through the hosts'
    listeners: each commits its partitions of ``orders`` (one higher each time) until ``stop_file`` exists.
    ``out_file`` gets, as it goes, the acknowledged offsets and when each commit was acknowledged."""
    import threading
    from collections import Counter

    from confluent_kafka import Consumer, KafkaException, TopicPartition

    lock = threading.Lock()
    acked: dict[int, int] = {}
    acked_at: list[float] = []
    errors: Counter = Counter()
    assignments: list[list[int]] = [[], []]

    def save() -> None:
        with lock:
            state = {"acked": {f"orders:{p}": o for p, o in sorted(acked.items())}, "acked_at": list(acked_at),
                     "errors": dict(errors), "assignments": [list(a) for a in assignments]}
        Path(out_file).write_text(json.dumps(state, sort_keys=True))

    def member(i: int) -> None:
        consumer = Consumer({"bootstrap.servers": kafka_bootstrap(), "group.id": group,
                             "client.id": f"{group}-{i}", "enable.auto.commit": False,
                             "session.timeout.ms": 10_000, "heartbeat.interval.ms": 1_000, "log_level": 0})
        consumer.subscribe(["orders"])
        while not os.path.exists(stop_file):
            consumer.poll(0.2)
            mine = sorted(tp.partition for tp in consumer.assignment())
            assignments[i] = mine
            if not mine:
                continue
            with lock:
                wanted = [TopicPartition("orders", p, acked.get(p, 0) + 1) for p in mine]
            try:
                done = consumer.commit(offsets=wanted, asynchronous=False)
            except KafkaException as e:  # the coordinator went away mid-commit: the next round retries
                with lock:
                    errors[e.args[0].name()] += 1
                continue
            with lock:
                for tp in done:
                    if tp.error is None:
                        acked[tp.partition] = max(acked.get(tp.partition, 0), tp.offset)
                        acked_at.append(time.time())
            time.sleep(0.1)
        consumer.close()

    threads = [threading.Thread(target=member, args=(i,), daemon=True) for i in range(2)]
    for t in threads:
        t.start()
    while any(t.is_alive() for t in threads):
        save()
        time.sleep(1)
    save()
    return json.loads(Path(out_file).read_text())


def _read_json(path: Path) -> dict:
    """A JSON file another process rewrites as it goes: {} while it is missing or half written."""
    try:
        return json.loads(path.read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        return {}


def kafka_group_facts(out_file: str, powered_off_at: float, expected_file: str, group: str = "kafka-app",
                      powered_on_at: float | None = None) -> dict:
    """What the Kafka group did: commits before and after the power-off (and, given when the host was
    powered on again, while it was off), the longest pause between two acknowledged commits around it (what
    a librdkafka client sees of the failover), and its acknowledged offsets added to what the later checks
    hold the deployment to."""
    state = json.loads(Path(out_file).read_text())
    times = state["acked_at"]
    around = [b - a for a, b in zip(times, times[1:], strict=False) if b >= powered_off_at]
    expected = json.loads(Path(expected_file).read_text())
    expected[group] = state["acked"]
    Path(expected_file).write_text(json.dumps(expected, sort_keys=True))
    after = sum(1 for t in times if t > powered_off_at)
    assert after > 0, f"the Kafka group committed nothing after the power-off: {state['errors']}"
    assert after < len(times), "the Kafka group committed nothing before the power-off"
    facts = {"commits_before_power_off": len(times) - after, "commits_after_power_off": after,
             "longest_commit_pause_s": round(max(around, default=0.0), 2), "errors": state["errors"],
             "partitions": len(state["acked"])}
    if powered_on_at is not None:
        facts["commits_while_off"] = sum(1 for t in times if powered_off_at < t < powered_on_at)
    return facts


PHASES = {"workload": phase_workload, "check": phase_check, "rejoined": phase_rejoined, "kafka": phase_kafka_group}


# --- the run ---------------------------------------------------------------------------------------------
AUTOSCALER_RESTART_S = 300  # how long a powered-on host is left to Ray's autoscaler
RAYLET_SETTLED_S = 60  # a raylet still running this long after it appeared has registered
HEAD_DOWN_S = 60  # how long the head is powered off (the raylets wait up to 300 s for its GCS)


def ray_restarted(host, config: Path) -> str:
    """Wait for Ray's autoscaler to restart Ray on ``host`` (it notices the lost raylet and runs the worker
    start commands). It tries once per node: a node whose restart failed (the host still off, or ``ray start``
    timing out on a loaded machine, whose raylet must register within 30 s) is never tried again
    (``StandardAutoscaler.can_update``: ``num_failed_updates``). Then the operator runs cluster.yaml's
    worker start commands on the host, as docs/operations.md says. Returns who restarted it."""
    import yaml

    def raylet_runs() -> bool:
        return testhosts.ssh(host, "pgrep -f '[r]aylet/raylet' >/dev/null", check=False, timeout_s=30).returncode == 0

    deadline = time.monotonic() + AUTOSCALER_RESTART_S
    while time.monotonic() < deadline:
        if raylet_runs():
            # A raylet that cannot register aborts within its waits (15 s for its agent's port, 30 s to
            # register): one still running a minute later has joined.
            time.sleep(RAYLET_SETTLED_S)
            if raylet_runs():
                return "autoscaler"
        time.sleep(5)
    commands = yaml.safe_load(config.read_text())["worker_start_ray_commands"]
    script = "; ".join(c.strip().replace("$RAY_HEAD_IP", HEAD.ip) for c in commands)
    testhosts.ssh(host, script, timeout_s=300)
    return "operator (the autoscaler's one restart failed)"


def head_start_command(config: Path) -> str:
    """cluster.yaml's ``ray start --head`` command: what the operator (or a supervisor) runs on a head that
    lost power, its GCS storage kept -- never the whole list, whose ``rm`` starts a new Ray cluster."""
    import yaml

    commands = yaml.safe_load(config.read_text())["head_start_ray_commands"]
    return next(c for c in commands if "ray start --head" in c).strip()


def kafka_group(run: Run, name: str, group: str) -> tuple[subprocess.Popen, Path, Path]:
    """Start ``phase_kafka_group`` as a process of its own; returns it with its stop and output files, once
    it committed on all 6 partitions."""
    stop, out = WORK / f"{group}.stop", WORK / f"{group}.json"
    stop.unlink(missing_ok=True)
    out.unlink(missing_ok=True)  # an earlier run's file would pass the wait below at once
    process = subprocess.Popen([sys.executable, __file__, "--phase", "kafka", str(stop), str(out), group],
                               env=launcher_env(), stdout=subprocess.DEVNULL,
                               stderr=open(run.out / f"phase-{name}.log", "w"))
    run.step(f"a confluent-kafka group of 2 ({group}) commits through the hosts' Kafka listeners", _wait,
             lambda: len(_read_json(out).get("acked", ())) == 6, 120, f"the Kafka group {group}'s commits on all 6 partitions")
    return process, stop, out


def teardown(run: Run) -> bool:
    """``ray down``, ``ray stop`` on the workers, the hosts down; whether nothing was left behind."""
    try:
        run.step("ray down", ray_cli, run, "down", "-y", str(WORK / "cluster.yaml"))
    except Exception as e:  # noqa: BLE001 - the hosts go down regardless
        run.say(f"ray down: {e}")
    run.step("ray stop on the workers", stop_ray_everywhere)
    left = run.step("teardown", testhosts.down)
    run.facts["left_behind"] = left
    run.say("teardown: nothing left behind" if not left else f"teardown left behind: {left}")
    return not left


def stop_ray_everywhere() -> None:
    """``ray down`` stops the head only; workers' raylets would linger for a minute."""
    for h in WORKERS:
        if testhosts._running(h):
            testhosts.ssh(h, "~/raygroups-venv/bin/ray stop --force || true", check=False, timeout_s=120)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="ray up cluster.yaml, end to end, on four local SSH hosts")
    parser.add_argument("--out", default=str(ROOT / "bench" / "results" / "ray-up"))
    parser.add_argument("--keep", action="store_true", help="leave the cluster and hosts running at the end")
    parser.add_argument("--partitions", type=int, default=None,
                        help="deploy this many partitions instead of cluster.yaml's 50 (the four hosts of this "
                             "script share one machine's cores, and every partition's shard is a process)")
    parser.add_argument("--phase", help=argparse.SUPPRESS)
    args, rest = parser.parse_known_args(argv)
    if args.partitions is not None and not 1 <= args.partitions <= 50:
        parser.error(f"--partitions must be 1..50 (cluster.yaml deploys 50), got {args.partitions}")
    if args.phase:
        print(json.dumps(PHASES[args.phase](*rest), sort_keys=True), flush=True)
        return 0
    run = Run(Path(args.out))
    expected = str(WORK / "expected-offsets.json")
    ok = False
    try:
        run.step("prepare: the venv every host's image has", prebake_venv)
        run.step("hosts up (4 network/PID/mount/UTS namespaces with sshd)", testhosts.up)
        wheel = run.step("build the wheel", build_wheel)
        run.step("Ray's TLS certificate for the 4 hosts (scripts/ray_tls.sh)", make_tls_certificate)
        what = "addresses, SSH user and key" + ("" if args.partitions is None else f", --partitions={args.partitions}")
        config = run.step(f"cluster.yaml copy ({what} substituted)", cluster_copy, wheel, args.partitions)
        run.facts["partitions"] = args.partitions or int(re.search(r"--partitions=(\d+)", config.read_text())[1])
        run.step("ray up", ray_cli, run, "up", "-y", "--no-config-cache", "--disable-usage-stats", str(config))
        run.facts["versions"] = run.step("every node runs the wheel's constraints.txt versions", check_node_versions)
        run.say(f"  {run.facts['versions']}")
        run.facts["tls"] = run.step("a Ray client without TLS is refused", plaintext_refused)
        run.say(f"  {run.facts['tls']}")
        run.facts["workload"] = run.step("workload: consumer group + 40 groups' commits, all served",
                                         client_phase, run, "workload", expected)
        run.say(f"  {run.facts['workload']}")
        run.facts["cli"] = run.step("raygroups status / groups list / groups describe through Ray client",
                                    check_operator_view, run)
        run.say(f"  {run.facts['cli']}")
        run.facts["cli_writes"] = run.step("raygroups offsets reset / offsets delete / groups delete, bad input",
                                           operator_writes, run, expected)
        run.say(f"  {run.facts['cli_writes']}")
        kafka, kafka_stop, kafka_out = kafka_group(run, "kafka", "kafka-app")
        leaders = run.facts["workload"]["leaders"]
        victim = testhosts.by_name(max((n for n in leaders if n), key=lambda n: leaders[n]))
        powered_off_at = time.time()
        run.step(f"power off {victim.name}", testhosts.stop, victim)
        run.facts["failover"] = run.step("failover: every partition served again, nothing lost",
                                         client_phase, run, "check", expected, "2", victim.name)
        run.say(f"  {run.facts['failover']}")
        assert run.facts["failover"]["ok"], run.facts["failover"]
        run.facts["cli_failover"] = run.step("the operator's view with a host down (under-replicated, healthy)",
                                             check_operator_view, run, False, True)
        run.say(f"  {run.facts['cli_failover']}")
        run.step(f"power on {victim.name}", testhosts.start, victim)
        restarted_by = run.step(f"Ray runs on {victim.name} again (the autoscaler restarts it, else the operator)",
                                ray_restarted, victim, config)
        run.facts["rejoin"] = run.step(f"{victim.name} rejoins under its name and in sync",
                                       client_phase, run, "rejoined", victim.name)
        run.facts["rejoin"]["ray_restarted_by"] = restarted_by
        run.say(f"  {run.facts['rejoin']}")
        kafka_stop.touch()
        run.step("the Kafka group stops", kafka.wait, 120)
        run.facts["kafka_group"] = run.step("the Kafka group committed across the power-off",
                                            kafka_group_facts, str(kafka_out), powered_off_at, expected)
        run.say(f"  {run.facts['kafka_group']}")
        # The head (Ray's GCS, the controller) powered off while a Kafka group commits: GCS fault tolerance.
        kafka, kafka_stop, kafka_out = kafka_group(run, "kafka-head", "kafka-head-app")
        head_off_at = time.time()
        run.step(f"power off the head {HEAD.name}", testhosts.stop, HEAD)
        run.step(f"the head stays off {HEAD_DOWN_S} s", time.sleep, HEAD_DOWN_S)
        head_on_at = time.time()
        run.step(f"power on the head {HEAD.name}", testhosts.start, HEAD)
        run.step("the operator starts the head's Ray again (cluster.yaml's `ray start --head`, its GCS kept)",
                 testhosts.ssh, HEAD, head_start_command(config), True, 300)
        run.facts["head_restart"] = run.step("after the head's return: every committed offset back, 3 nodes",
                                             client_phase, run, "check", expected, "3")
        run.say(f"  {run.facts['head_restart']}")
        assert run.facts["head_restart"]["ok"], run.facts["head_restart"]
        kafka_stop.touch()
        run.step("the Kafka group stops", kafka.wait, 120)
        run.facts["kafka_group_head"] = run.step("the Kafka group committed while the head was off",
                                                 kafka_group_facts, str(kafka_out), head_off_at, expected,
                                                 "kafka-head-app", head_on_at)
        run.say(f"  {run.facts['kafka_group_head']}")
        assert run.facts["kafka_group_head"]["commits_while_off"] > 0, run.facts["kafka_group_head"]
        run.step("ray down", ray_cli, run, "down", "-y", str(config))
        run.step("ray stop on the workers", stop_ray_everywhere)
        run.step("ray up again", ray_cli, run, "up", "-y", "--no-config-cache", "--disable-usage-stats", str(config))
        run.facts["restart"] = run.step("after ray down / ray up: every committed offset back",
                                        client_phase, run, "check", expected, "3")
        run.say(f"  {run.facts['restart']}")
        assert run.facts["restart"]["ok"], run.facts["restart"]
        ok = True
    except Exception as e:  # noqa: BLE001 - reported, then torn down
        run.say(f"FAILED: {type(e).__name__}: {e}")
    finally:
        if not args.keep:
            ok = teardown(run) and ok
        run.save(ok)
        run.say("OK: ray up end to end" if ok else "FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
