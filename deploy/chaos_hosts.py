"""The chaos benchmark on real hosts: ``ray up cluster.yaml`` on the four namespaced SSH hosts of
``testhosts.py`` (a head and three coordinator hosts), then ``raygroups chaos run``'s workload, nemesis and
checker from this machine, with the faults simulated nodes cannot have:

- ``host-partition``: a coordinator host's link down (cut off from everyone), then healed;
- ``leader-isolate``: the leader's host cut off the head only (Ray's GCS, the controller), by blackhole
  routes on both sides, while its clients and the other coordinator hosts still reach it;
- ``head-isolate``: the head cut off every coordinator host, not off the clients;
- ``host-pause``: every process of a host stopped (SIGSTOP), then resumed, as a frozen VM;
- and the node faults on hosts: a host powered off (``node-kill``, ``follower-loss``, ``controller-kill``,
  ``full-restart``), Ray stopped on it (``node-stop``), powered off and on at once (``node-restart``).

Packets cannot be delayed or dropped at random here: this machine's kernel has no netem
(``testhosts.delay`` raises ``NetemUnavailable``), so a slow link is not among the faults.

This machine takes part as a Ray node of its own at the bridge's address (198.18.0.1, no coordinator
resource): the run's process is a driver there, and the consumers and probes are actors there, so that a
leader cut off the head is still reached by its clients, whose calls go straight to it. Ray declares a host
that stays silent beyond its health checks dead; once it is back, Ray is started on it again (cluster.yaml's
worker start commands, as the operator would). Its output directory gets what ``raygroups chaos run`` writes,
plus ``run.log`` and ``timings.json`` of the setup.

``python deploy/chaos_hosts.py [--seconds 300] [--seed 1] [--rate 6] [--faults a,b] [--out DIR] [--keep]``
(root; ``make hosts-check`` installs what the hosts need).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import ray_up_e2e as e2e  # noqa: E402
import testhosts  # noqa: E402
from testhosts import BRIDGE_IP, HEAD, WORK, WORKERS  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
GCS_ADDRESS = f"{HEAD.ip}:6379"
CLIENT_TEMP = WORK / "client-ray"  # this machine's Ray node: its sockets, logs, session
HOST_FAULT_DEFAULTS = ("host-partition,leader-isolate,head-isolate,host-pause,node-kill,node-stop,follower-loss,"
                       "shard-kill,leader-flap,leader-pause,consumer-kill")


class TestHosts:
    """``raygroups.chaos.hosts.HostControl`` over ``testhosts``: the coordinator nodes' names are the hosts'."""

    head = HEAD.name

    def __init__(self, config: Path) -> None:
        self._config = config

    def coordinator_hosts(self) -> list[str]:
        return [w.name for w in WORKERS]

    def power_off(self, host: str) -> None:
        testhosts.stop(testhosts.by_name(host))

    def power_on(self, host: str) -> None:
        testhosts.start(testhosts.by_name(host))

    def start_ray(self, host: str) -> None:
        import yaml

        commands = yaml.safe_load(self._config.read_text())["worker_start_ray_commands"]
        script = "; ".join(c.strip().replace("$RAY_HEAD_IP", HEAD.ip) for c in commands)
        testhosts.ssh(testhosts.by_name(host), script, timeout_s=300)

    def stop_ray(self, host: str) -> None:
        testhosts.ssh(testhosts.by_name(host), "~/raygroups-venv/bin/ray stop", timeout_s=120)

    def cut(self, host: str) -> None:
        testhosts.partition(testhosts.by_name(host))

    def heal(self, host: str) -> None:
        testhosts.heal(testhosts.by_name(host))

    def isolate(self, a: str, b: str) -> None:
        testhosts.isolate(testhosts.by_name(a), testhosts.by_name(b))

    def reconnect(self, a: str, b: str) -> None:
        testhosts.reconnect(testhosts.by_name(a), testhosts.by_name(b))

    def pause(self, host: str) -> None:
        testhosts.pause(testhosts.by_name(host))

    def resume(self, host: str) -> None:
        testhosts.resume(testhosts.by_name(host))

    def signal(self, host: str, pid: int, sig: int) -> bool:
        done = testhosts.ssh(testhosts.by_name(host), f"kill -{int(sig)} {int(pid)}", check=False, timeout_s=30)
        return done.returncode == 0


def make_tls_certificate() -> None:
    """The cluster's certificate names this machine's bridge address too: it is a Ray node of the run."""
    subprocess.run(["sh", str(ROOT / "scripts" / "ray_tls.sh"), HEAD.ip, *(w.ip for w in WORKERS), BRIDGE_IP],
                   check=True, capture_output=True)


def client_node_env() -> dict[str, str]:
    return dict(e2e.launcher_env(), RAY_gcs_rpc_server_reconnect_timeout_s="300")


def join_client_node() -> None:
    """This machine joins the Ray cluster as a node at the bridge's address, with no coordinator resource
    (nothing of the deployment is placed on it), and a temp dir of its own (any other Ray here is left be)."""
    CLIENT_TEMP.mkdir(parents=True, exist_ok=True)
    ray = str(Path(sys.executable).parent / "ray")
    subprocess.run([ray, "start", f"--address={GCS_ADDRESS}", f"--node-ip-address={BRIDGE_IP}",
                    f"--temp-dir={CLIENT_TEMP}", "--num-cpus=8", "--disable-usage-stats"],
                   env=client_node_env(), check=True, capture_output=True, timeout=180, stdin=subprocess.DEVNULL)


def leave_client_node() -> list[int]:
    """Stop this machine's Ray node: every process whose command line names its temp dir (``ray stop`` would
    stop every Ray process it can see, the hosts' included)."""
    marker = str(CLIENT_TEMP).encode()
    killed = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            if marker in (entry / "cmdline").read_bytes():
                os.kill(int(entry.name), signal.SIGKILL)
                killed.append(int(entry.name))
        except (OSError, ProcessLookupError):
            pass
    return killed


def wait_serving(timeout_s: float = 600) -> dict:
    """In a process of its own (one Ray driver per process): the deployment registered and every partition led
    by an ACTIVE shard."""
    done = subprocess.run([sys.executable, __file__, "--phase", "serving"], env=client_node_env(),
                          capture_output=True, text=True, timeout=timeout_s)
    if done.returncode != 0:
        raise RuntimeError(f"the deployment does not serve: {done.stderr.strip()[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def _init_ray() -> None:
    import logging

    import ray

    logging.getLogger("ray").setLevel(logging.ERROR)
    ray.init(address=GCS_ADDRESS, _node_ip_address=BRIDGE_IP, log_to_driver=False, logging_level="ERROR")


def phase_serving() -> dict:
    import raygroups

    _init_ray()
    deadline = time.monotonic() + 540
    while True:
        try:
            cluster = raygroups.connect(GCS_ADDRESS, e2e.NAMESPACE)
            states = [s["state"] for s in cluster.shard_status(timeout_s=10)]
            if states and all(s == "ACTIVE" for s in states):
                return {"partitions": len(states), "nodes": cluster.coordinator_nodes()}
        except Exception as e:  # noqa: BLE001 - still coming up
            print(f"(not yet: {type(e).__name__}: {str(e)[:200]})", file=sys.stderr)
        if time.monotonic() > deadline:
            raise TimeoutError("the deployment did not serve every partition within 540 s")
        time.sleep(2)


def phase_chaos(args: argparse.Namespace, config: Path) -> int:
    from raygroups.chaos.faults import parse_faults
    from raygroups.chaos.run import RunOptions
    from raygroups.cli.chaos import run_benchmark

    _init_ray()
    faults = parse_faults(args.faults, replicated=True, hosts=True)
    options = RunOptions(seconds=args.seconds, seed=args.seed, rate=args.rate, groups=args.groups,
                         consumers=args.consumers, out=args.out, address=GCS_ADDRESS, namespace=e2e.NAMESPACE,
                         faults=faults)
    return run_benchmark(options, faults, hosts=TestHosts(config))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="raygroups chaos run on the four namespaced SSH hosts")
    parser.add_argument("--seconds", type=float, default=300.0)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--rate", type=float, default=6.0, help="faults per minute")
    parser.add_argument("--groups", type=int, default=2)
    parser.add_argument("--consumers", type=int, default=2)
    parser.add_argument("--faults", default=HOST_FAULT_DEFAULTS)
    parser.add_argument("--partitions", type=int, default=6, help="coordinator partitions (cluster.yaml: 50)")
    parser.add_argument("--out", default=str(ROOT / "bench" / "results" / "chaos-hosts"))
    parser.add_argument("--keep", action="store_true", help="leave the cluster and hosts running at the end")
    parser.add_argument("--phase", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if not 1 <= args.partitions <= 50:
        parser.error(f"--partitions must be 1..50, got {args.partitions}")
    if not 0 < args.seconds <= 7 * 24 * 3600:
        parser.error(f"--seconds must be in (0, 604800], got {args.seconds:g}")
    if not 0 < args.rate <= 600:
        parser.error(f"--rate must be in (0, 600] faults a minute, got {args.rate:g}")
    from raygroups.chaos.faults import parse_faults

    try:
        parse_faults(args.faults, replicated=True, hosts=True)
    except ValueError as e:
        parser.error(str(e))
    if args.phase == "serving":
        print(json.dumps(phase_serving()), flush=True)
        return 0
    if args.phase == "chaos":
        return phase_chaos(args, WORK / "cluster.yaml")
    out = Path(args.out)
    run = e2e.Run(out / "setup")
    ok = False
    try:
        run.step("prepare: the venv every host's image has", e2e.prebake_venv)
        run.step("hosts up (4 network/PID/mount/UTS namespaces with sshd)", testhosts.up)
        wheel = run.step("build the wheel", e2e.build_wheel)
        run.step("Ray's TLS certificate for the 4 hosts and this machine", make_tls_certificate)
        config = run.step(f"cluster.yaml copy (--partitions={args.partitions})", e2e.cluster_copy, wheel,
                          args.partitions)
        run.step("ray up", e2e.ray_cli, run, "up", "-y", "--no-config-cache", "--disable-usage-stats", str(config))
        run.step(f"this machine joins as the clients' Ray node ({BRIDGE_IP})", join_client_node)
        run.facts["serving"] = run.step("every partition served", wait_serving)
        run.say(f"  {run.facts['serving']}")
        chaos_args = [a for a in (argv if argv is not None else sys.argv[1:]) if a != "--keep"]
        started = time.monotonic()
        code = subprocess.run([sys.executable, __file__, "--phase", "chaos", *chaos_args], env=client_node_env(),
                              stdin=subprocess.DEVNULL).returncode
        run.timings["chaos run"] = round(time.monotonic() - started, 1)
        run.facts["chaos_exit"] = code
        ok = code == 0
    except Exception as e:  # noqa: BLE001 - reported, then torn down
        run.say(f"FAILED: {type(e).__name__}: {e}")
    finally:
        run.facts["client_node_processes_stopped"] = len(leave_client_node())
        if not args.keep:
            ok = e2e.teardown(run) and ok
        run.save(ok)
        run.say("OK: chaos on the hosts, valid verdict" if ok else "FAILED (or the verdict is not valid)")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
