"""Real SSH hosts on this machine for ``ray up``: a head and three coordinator nodes, each a network
namespace with its own sshd, and its own PID, mount and UTS namespaces (a private ``/tmp``, ``/dev/shm``,
home and host name), on a bridge in 198.18.0.0/24 (RFC 2544's benchmarking range: nothing else lives there).

Why each namespace: ``ray stop`` (the first start command, and what ``ray down`` runs) kills every Ray
process it can see by name, so each host needs its own PIDs; Ray keeps sockets and state in ``/tmp`` and
``/dev/shm``; the coordinator node's name is made from its host name; the home holds the venv and the
data directory, so each host gets its own (an overlay over this machine's ``/root``: what is there --
Python, a prepared venv -- is shared copy-on-write, as a machine image would be; what a host writes stays
its own, across restarts of the host, like a disk).

Root only. ``python deploy/testhosts.py up|down|status|stop HOST|start HOST|partition HOST|heal HOST|pause HOST|
resume HOST|isolate HOST OTHER|reconnect HOST OTHER|delay HOST MS``: the faults ``deploy/chaos_hosts.py``
injects on these hosts (a partition takes the host's link down; an isolation drops what two hosts send each
other, by blackhole routes; a pause stops every process of a host; a delay is ``tc netem``, which some
kernels lack -- this project's machines among them: ``delay`` then raises ``NetemUnavailable``). ``deploy/ray_up_e2e.py`` uses
the hosts to prove ``ray up cluster.yaml`` end to end.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

# Not under /tmp: each host mounts a /tmp of its own, and its sshd reads its configuration from here.
WORK = Path(os.environ.get("RAYGROUPS_TESTHOSTS_DIR", "/var/tmp/raygroups-testhosts"))
BRIDGE = "rgbr0"
BRIDGE_IP = "198.18.0.1"
PREFIX = 24


@dataclass(frozen=True)
class Host:
    name: str  # also the network namespace's name and the host name
    ip: str

    @property
    def dir(self) -> Path:
        return WORK / self.name

    @property
    def veth(self) -> str:
        return f"v-{self.name}"[:15]


HOSTS = [Host("rg-head", "198.18.0.10"), Host("rg-coord-a", "198.18.0.11"), Host("rg-coord-b", "198.18.0.12"),
         Host("rg-coord-c", "198.18.0.13")]
HEAD, WORKERS = HOSTS[0], HOSTS[1:]
KEY = WORK / "id_ed25519"


def by_name(name: str) -> Host:
    for h in HOSTS:
        if h.name == name:
            return h
    raise SystemExit(f"unknown host {name!r}; the hosts are {[h.name for h in HOSTS]}")


def sh(*args: str, check: bool = True, quiet: bool = False) -> subprocess.CompletedProcess:
    done = subprocess.run(list(args), capture_output=True, text=True)
    if check and done.returncode != 0:
        raise RuntimeError(f"{' '.join(args)} failed ({done.returncode}): {done.stderr.strip() or done.stdout.strip()}")
    if not quiet and done.returncode != 0:
        print(f"  ({' '.join(args)}: {done.stderr.strip()})", file=sys.stderr)
    return done


def _require() -> None:
    if os.geteuid() != 0:
        raise SystemExit("testhosts needs root (network namespaces, mounts)")
    missing = [t for t in ("ip", "unshare", "/usr/sbin/sshd", "ssh", "ssh-keygen", "rsync", "tc") if not shutil.which(t)]
    if missing:
        raise SystemExit(f"missing tools: {missing} (apt-get install -y openssh-server rsync iproute2)")


# --- network ---------------------------------------------------------------------------------------------
def _network_up() -> None:
    if sh("ip", "link", "show", BRIDGE, check=False, quiet=True).returncode != 0:
        sh("ip", "link", "add", BRIDGE, "type", "bridge")
        sh("ip", "addr", "add", f"{BRIDGE_IP}/{PREFIX}", "dev", BRIDGE)
    sh("ip", "link", "set", BRIDGE, "up")
    existing = set(sh("ip", "netns", "list").stdout.split())
    for h in HOSTS:
        if h.name not in existing:
            sh("ip", "netns", "add", h.name)
        if sh("ip", "link", "show", h.veth, check=False, quiet=True).returncode != 0:
            sh("ip", "link", "add", h.veth, "type", "veth", "peer", "name", "eth0", "netns", h.name)
            sh("ip", "link", "set", h.veth, "master", BRIDGE)
            sh("ip", "-n", h.name, "addr", "add", f"{h.ip}/{PREFIX}", "dev", "eth0")
        sh("ip", "link", "set", h.veth, "up")
        sh("ip", "-n", h.name, "link", "set", "lo", "up")
        sh("ip", "-n", h.name, "link", "set", "eth0", "up")
        # No default route: the hosts reach each other and this machine's bridge address, nothing else.


def _network_down() -> None:
    existing = set(sh("ip", "netns", "list").stdout.split())
    for h in HOSTS:
        sh("ip", "link", "del", h.veth, check=False, quiet=True)
        if h.name in existing:
            sh("ip", "netns", "del", h.name, check=False)
    sh("ip", "link", "del", BRIDGE, check=False, quiet=True)


# --- sshd per host ---------------------------------------------------------------------------------------
def _prepare(h: Host) -> None:
    for sub in ("upper", "work", "run"):
        (h.dir / sub).mkdir(parents=True, exist_ok=True)
    hostkey = h.dir / "ssh_host_ed25519_key"
    if not hostkey.exists():
        sh("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(hostkey))
    (h.dir / "authorized_keys").write_text(Path(f"{KEY}.pub").read_text())
    os.chmod(h.dir / "authorized_keys", 0o600)
    (h.dir / "sshd_config").write_text("\n".join([
        f"ListenAddress {h.ip}", f"HostKey {hostkey}", "PidFile none",
        f"AuthorizedKeysFile {h.dir / 'authorized_keys'}", "PermitRootLogin prohibit-password",
        "PasswordAuthentication no", "KbdInteractiveAuthentication no", "UsePAM no", "StrictModes no",
        "AcceptEnv LANG LC_*", "MaxSessions 64", "MaxStartups 64:30:128", "ClientAliveInterval 10", "",
    ]))
    # PID 1 of the host: its own /tmp, /dev/shm, home (overlay over /root) and host name, then sshd.
    init = h.dir / "init.sh"
    init.write_text(f"""#!/bin/bash
set -e
hostname {h.name}
mount -t tmpfs -o mode=1777 tmpfs /tmp
mount -t tmpfs -o mode=1777 tmpfs /dev/shm
mount -t overlay overlay -o lowerdir=/root,upperdir={h.dir}/upper,workdir={h.dir}/work /root
mkdir -p /run/sshd
exec /usr/sbin/sshd -D -f {h.dir}/sshd_config -E {h.dir}/sshd.log
""")
    os.chmod(init, 0o755)


def _host_pids(h: Host) -> list[int]:
    """This machine's PIDs of every process of the host: those in its network namespace (the ``unshare``
    that holds it, its sshd -- PID 1 inside -- and whatever runs there). The PIDs sshd would write are
    those inside the host's PID namespace, useless out here."""
    done = sh("ip", "netns", "pids", h.name, check=False, quiet=True)
    return sorted(int(p) for p in done.stdout.split()) if done.returncode == 0 else []


def _running(h: Host) -> bool:
    return bool(_host_pids(h))


def start(h: Host, timeout_s: float = 30) -> None:
    """Boot the host (its namespaces and sshd); returns once it accepts SSH."""
    if not _running(h):
        log = open(h.dir / "host.log", "ab")
        subprocess.Popen(["ip", "netns", "exec", h.name, "unshare", "--mount", "--propagation", "private",
                          "--pid", "--fork", "--kill-child", "--mount-proc", "--uts", str(h.dir / "init.sh")],
                         stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True)
    deadline = time.monotonic() + timeout_s
    while ssh(h, "true", check=False, timeout_s=10).returncode != 0:
        if time.monotonic() > deadline:
            raise RuntimeError(f"host {h.name} does not accept SSH after {timeout_s:g} s (see {h.dir}/sshd.log)")
        time.sleep(0.5)


def stop(h: Host, timeout_s: float = 30) -> None:
    """Power the host off: its sshd is PID 1's only child, and when it dies the kernel ends every process of
    the host's PID namespace (Ray included), as a crash would. Its disk (the home overlay) stays."""
    for pid in _host_pids(h):
        try:
            os.kill(pid, signal.SIGKILL)  # the host's PID 1 among them: the kernel ends the rest of the host
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + timeout_s
    while _running(h):
        if time.monotonic() > deadline:
            raise RuntimeError(f"host {h.name} does not stop: {_host_pids(h)}")
        time.sleep(0.1)


def ssh(h: Host, command: str, check: bool = True, timeout_s: float = 600) -> subprocess.CompletedProcess:
    """Run ``command`` on the host in a login shell (as ``ray up`` does: the venv is on PATH there)."""
    args = ["ssh", "-i", str(KEY), "-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null",
            "-o", "LogLevel=ERROR", "-o", "ConnectTimeout=5", "-o", "BatchMode=yes", f"root@{h.ip}",
            f"bash --login -c {json.dumps(command)}"]
    try:
        done = subprocess.run(args, capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        done = subprocess.CompletedProcess(args, 124, "", f"timed out after {timeout_s:g} s")
    if check and done.returncode != 0:
        raise RuntimeError(f"{h.name}: {command!r} failed ({done.returncode}): {done.stderr.strip()[-2000:]}")
    return done


# --- network faults (the chaos benchmark's, on real hosts) -----------------------------------------------
def partition(h: Host) -> None:
    """Cut the host off the network (its link down): Ray on the other side sees it go silent."""
    sh("ip", "link", "set", h.veth, "down")


def heal(h: Host) -> None:
    sh("ip", "link", "set", h.veth, "up")
    sh("tc", "qdisc", "del", "dev", h.veth, "root", check=False, quiet=True)


def isolate(a: Host, b: Host) -> None:
    """``a`` and ``b`` no longer reach each other (a blackhole route on each side: packets dropped, no error
    sent back, as on a partitioned network); each still reaches every other host."""
    sh("ip", "-n", a.name, "route", "replace", "blackhole", f"{b.ip}/32")
    sh("ip", "-n", b.name, "route", "replace", "blackhole", f"{a.ip}/32")


def reconnect(a: Host, b: Host) -> None:
    sh("ip", "-n", a.name, "route", "del", "blackhole", f"{b.ip}/32", check=False, quiet=True)
    sh("ip", "-n", b.name, "route", "del", "blackhole", f"{a.ip}/32", check=False, quiet=True)


def _signal_all(h: Host, sig: int) -> None:
    for pid in _host_pids(h):
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            pass


def pause(h: Host) -> None:
    """Stop every process of the host (SIGSTOP), as a frozen VM: nothing of it runs, nothing answers."""
    _signal_all(h, signal.SIGSTOP)


def resume(h: Host) -> None:
    _signal_all(h, signal.SIGCONT)


class NetemUnavailable(RuntimeError):
    """This kernel has no netem qdisc (CONFIG_NET_SCH_NETEM), so packets cannot be delayed."""


def delay(h: Host, ms: int, jitter_ms: int = 0) -> None:
    """Delay every packet the host receives by ``ms`` (tc netem on its end of the link)."""
    done = sh("tc", "qdisc", "replace", "dev", h.veth, "root", "netem", "delay", f"{ms}ms", f"{jitter_ms}ms",
              check=False, quiet=True)
    if done.returncode != 0:
        if "qdisc kind is unknown" in done.stderr:
            raise NetemUnavailable(f"cannot delay {h.name}'s packets: this kernel ({os.uname().release}) has no "
                                   f"netem qdisc (CONFIG_NET_SCH_NETEM)")
        raise RuntimeError(f"tc netem on {h.veth} failed: {done.stderr.strip()}")


# --- whole set -------------------------------------------------------------------------------------------
def up() -> None:
    _require()
    WORK.mkdir(parents=True, exist_ok=True)
    if not KEY.exists():
        sh("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(KEY), "-C", "raygroups-testhosts")
    _network_up()
    for h in HOSTS:
        _prepare(h)
        start(h)


def down(wipe: bool = True) -> list[str]:
    """Stop every host, remove namespaces, links and (``wipe``) the hosts' disks; what is left behind."""
    for h in HOSTS:
        stop(h)
    _network_down()
    if wipe:
        for h in HOSTS:
            if h.dir.exists():
                # The overlay's work dir holds a root-only subdirectory; rmtree handles it as root.
                shutil.rmtree(h.dir, ignore_errors=True)
    return leftovers()


def leftovers() -> list[str]:
    left = []
    namespaces = set(sh("ip", "netns", "list").stdout.split())
    left += [f"netns {h.name}" for h in HOSTS if h.name in namespaces]
    left += [f"link {n}" for n in [BRIDGE, *(h.veth for h in HOSTS)]
             if sh("ip", "link", "show", n, check=False, quiet=True).returncode == 0]
    left += [f"processes of {h.name}: {_host_pids(h)}" for h in HOSTS if _running(h)]
    # A host whose namespace name is gone but whose processes live on: its unshare or sshd names its files.
    ps = sh("ps", "-eo", "pid,args").stdout.splitlines()
    left += [f"process {line.strip()}" for line in ps
             if any(f"{h.dir}/{f}" in line for h in HOSTS for f in ("init.sh", "sshd_config"))]
    return left


def status() -> dict:
    return {h.name: {"ip": h.ip, "running": _running(h),
                     "link": "up" if "state UP" in sh("ip", "link", "show", h.veth, check=False, quiet=True).stdout
                     else "down"} for h in HOSTS}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("up")
    sub.add_parser("down")
    sub.add_parser("status")
    for name in ("stop", "start", "partition", "heal", "pause", "resume"):
        sub.add_parser(name).add_argument("host")
    for name in ("isolate", "reconnect"):
        pair = sub.add_parser(name)
        pair.add_argument("host")
        pair.add_argument("other")
    d = sub.add_parser("delay")
    d.add_argument("host")
    d.add_argument("ms", type=int)
    args = parser.parse_args(argv)
    if args.command == "up":
        up()
        print(json.dumps(status(), indent=2))
    elif args.command == "down":
        left = down()
        print("nothing left behind" if not left else "left behind: " + ", ".join(left))
        return 1 if left else 0
    elif args.command == "status":
        print(json.dumps(status(), indent=2))
    elif args.command == "delay":
        delay(by_name(args.host), args.ms)
    elif args.command in ("isolate", "reconnect"):
        {"isolate": isolate, "reconnect": reconnect}[args.command](by_name(args.host), by_name(args.other))
    else:
        {"stop": stop, "start": start, "partition": partition, "heal": heal, "pause": pause,
         "resume": resume}[args.command](by_name(args.host))
    return 0


if __name__ == "__main__":
    sys.exit(main())
