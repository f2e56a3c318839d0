"""deploy/testhosts.py: the four SSH hosts that ``ray up`` and the chaos benchmark's network faults use.
Each host has its own host name, PIDs, /tmp and home; a partition cuts a host off and heal brings it back;
netem delays its packets; ``down`` leaves no namespace, link or process behind. Root only (as CI is)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "deploy"))
import testhosts  # noqa: E402

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(os.geteuid() != 0, reason="network namespaces need root (CI runs as root)")]


@pytest.fixture(scope="module")
def hosts():
    if not shutil.which("sshd") and not Path("/usr/sbin/sshd").exists():
        pytest.fail("openssh-server is not installed (.ci/run installs it: apt-get install openssh-server rsync)")
    # Not under /tmp: every host mounts a /tmp of its own over it, and its sshd reads its config from here.
    testhosts.WORK = Path(tempfile.mkdtemp(prefix="raygroups-testhosts-", dir="/var/tmp"))
    testhosts.KEY = testhosts.WORK / "id_ed25519"
    testhosts.down()  # hosts another run left behind would hold the addresses
    try:
        testhosts.up()
        yield testhosts.HOSTS
    finally:
        left = testhosts.down()
        shutil.rmtree(testhosts.WORK, ignore_errors=True)
    assert left == []


PROBE = """
import socket, sys, time
t = time.monotonic()
try:
    socket.create_connection((sys.argv[1], 22), timeout=2).close()
except OSError:
    sys.exit(1)
print((time.monotonic() - t) * 1000)
"""


def _ping_ms(host, target_ip):
    """Milliseconds for a TCP connect from ``host`` to ``target_ip``'s sshd (one round trip), None if
    unreachable."""
    done = subprocess.run(["ip", "netns", "exec", host.name, sys.executable, "-c", PROBE, target_ip],
                          capture_output=True, text=True)
    return float(done.stdout) if done.returncode == 0 else None


def test_each_host_is_a_machine_of_its_own(hosts):
    seen = []
    for h in hosts:
        out = testhosts.ssh(h, "hostname; hostname -I; echo $$; touch /tmp/mine-$(hostname); ls /tmp; "
                               "ps -e --no-headers | wc -l; echo x > ~/disk-$(hostname); ls ~ | grep disk-").stdout.split()
        name, ip, _pid, *rest = out
        assert name == h.name and ip == h.ip
        assert [f for f in rest if f.startswith("mine-")] == [f"mine-{h.name}"]  # a /tmp of its own
        assert [f for f in rest if f.startswith("disk-")] == [f"disk-{h.name}"]  # a home of its own
        processes = int(next(r for r in rest if r.isdigit()))
        assert processes < 20  # its own PID namespace: not this machine's processes
        seen.append(name)
    assert len(set(seen)) == 4


def test_partition_heal_delay_and_power(hosts):
    a, b = hosts[1], hosts[2]
    assert _ping_ms(a, b.ip) is not None
    testhosts.partition(b)
    assert _ping_ms(a, b.ip) is None
    testhosts.heal(b)
    deadline = time.monotonic() + 10
    while _ping_ms(a, b.ip) is None:
        assert time.monotonic() < deadline, "the link did not come back"
    try:
        testhosts.delay(b, 200)
    except testhosts.NetemUnavailable as e:
        # Some kernels are built without netem (this project's CI machines among them): said plainly.
        assert "no netem qdisc" in str(e)
    else:
        assert _ping_ms(a, b.ip) >= 190
        testhosts.heal(b)
        assert _ping_ms(a, b.ip) < 100
    testhosts.stop(b)
    assert testhosts.ssh(b, "true", check=False, timeout_s=15).returncode != 0
    testhosts.start(b)
    # Powered on again: the same disk (home), a fresh /tmp.
    out = testhosts.ssh(b, "ls ~ | grep disk-; ls /tmp | wc -l").stdout.split()
    assert out == [f"disk-{b.name}", "0"]


def test_isolate_cuts_two_hosts_off_each_other_only_and_pause_freezes_a_host(hosts):
    head, a, b = hosts[0], hosts[1], hosts[2]
    testhosts.isolate(a, head)
    try:
        assert _ping_ms(a, head.ip) is None and _ping_ms(head, a.ip) is None
        assert _ping_ms(a, b.ip) is not None and _ping_ms(head, b.ip) is not None  # the rest still reach both
    finally:
        testhosts.reconnect(a, head)
    assert _ping_ms(a, head.ip) is not None
    testhosts.pause(b)
    try:
        # A frozen host: its sshd starts no session (its kernel still completes TCP handshakes).
        assert testhosts.ssh(b, "true", check=False, timeout_s=5).returncode != 0
    finally:
        testhosts.resume(b)
    assert testhosts.ssh(b, "true", timeout_s=30).returncode == 0
