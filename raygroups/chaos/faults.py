"""The fault catalogue and the seeded schedule of a chaos run (pure: no Ray, no clock).

A run's schedule is drawn from its seed alone: when each fault starts (Poisson arrivals at ``rate`` faults
per minute), which fault, which group it aims at and how long it lasts. Targets that depend on the
cluster's state (the node leading a group's partition at that moment) are resolved when the fault is
injected, so the same seed gives the same schedule while timings may differ.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

# name -> (what it does, needs a replicated deployment, weight in the mix)
CATALOGUE: dict[str, tuple[str, bool, int]] = {
    "shard-kill": ("SIGKILL the process of the shard leading a group's partition", False, 4),
    "shard-stop": ("SIGTERM (a clean stop of) the process of the shard leading a group's partition; another "
                   "replica takes over", True, 2),
    "leader-flap": ("kill whoever leads a group's partition three times, each once a new leader serves", False, 2),
    "leader-pause": ("SIGSTOP the leader shard's process for longer than a failover, then SIGCONT: the "
                     "zombie must neither answer nor write", False, 2),
    "consumer-kill": ("kill a consumer actor without a goodbye (a new consumer process replaces it)", False, 3),
    "consumer-pause": ("SIGSTOP a consumer's process beyond its session timeout, then SIGCONT", False, 2),
    "node-kill": ("kill the node leading a group's partition (its raylet dies), restart it later", True, 2),
    "node-stop": ("stop the node leading a group's partition gracefully, restart it later", True, 1),
    "node-restart": ("restart the node leading a group's partition under its own name at once", True, 1),
    "follower-loss": ("kill a node following a group's partition, restart it later", True, 2),
    "controller-kill": ("kill the leader's node, then the controller actor mid-failover", True, 1),
    "torn-tail": ("kill a follower node, cut the tail of its replica's last segment, restart it", True, 1),
    "bit-flip": ("kill a follower node, flip a bit in its replica's last batch, restart it", True, 1),
    "full-restart": ("kill every coordinator node, then start them all again", True, 1),
    "disk-full": ("fill the data directory of the node leading a group's partition (its own small tmpfs) "
                  "until writes fail with ENOSPC, free it, restart the node (as Kafka needs for a failed log "
                  "directory)", True, 1),
    "head-restart": ("kill the head's GCS and the controller (what losing the head takes), start them again "
                     "after a few seconds: the leaders keep serving meanwhile", True, 1),
    "compaction-kill": ("SIGKILL the compaction job (the watch process, its Spark driver and executors) in the "
                        "middle of a round: in its Spark job, after its proof, or between two swaps; a "
                        "supervisor starts it again", False, 1),
    "compaction-failover": ("kill the leader shard of the partition a compaction round swaps last, as soon as "
                            "the round's equivalence proof is in: a new leader before the swap", True, 1),
    "host-partition": ("cut the host of the node leading a group's partition off the network (its link down), "
                       "heal it; Ray declares the node dead meanwhile, and it is started again once it hears so",
                       True, 2),
    "leader-isolate": ("cut the leader's host off the head (Ray's GCS and the controller) only: its clients and "
                       "the other coordinator hosts still reach it; heal it", True, 2),
    "head-isolate": ("cut the head off every coordinator host (not off the clients): Ray's GCS and the "
                     "controller see no coordinator node; heal it", True, 1),
    "host-pause": ("SIGSTOP every process of the host leading a group's partition (a frozen VM), then SIGCONT",
                   True, 1),
}
# The faults that need compaction rounds beside the run (``--compaction-every``): out of the mix otherwise.
COMPACTION_FAULTS = ("compaction-kill", "compaction-failover")
# The faults only real hosts can take (``deploy/chaos_hosts.py``: their links, their whole process trees).
HOST_FAULTS = ("host-partition", "leader-isolate", "head-isolate", "host-pause")
# The faults that need the simulated cluster's own parts: its nodes' data directories on this machine, its
# head's GCS process.
SIMULATED_FAULTS = ("torn-tail", "bit-flip", "disk-full", "head-restart")
HEAD_DOWN_S = (3.0, 8.0)  # how long a head-restart keeps the head's GCS down


CONSUMER_FAULTS = ("consumer-kill", "consumer-pause")


def faults_for(replicated: bool, compaction: bool = False, hosts: bool = False) -> list[str]:
    """The catalogue's faults a deployment can take (node faults need a replicated one, simulated or on real
    hosts; links and whole hosts need real hosts; a simulated node's disk and GCS need a simulated one; the
    compaction job's faults need compaction rounds)."""
    return [name for name, (_, needs, _) in CATALOGUE.items()
            if (replicated or not needs) and (compaction or name not in COMPACTION_FAULTS)
            and (hosts or name not in HOST_FAULTS) and not (hosts and name in SIMULATED_FAULTS)]


def parse_faults(text: str | None, replicated: bool, compaction: bool = False, hosts: bool = False) -> list[str]:
    """``--faults a,b``: known names only, and only those this deployment (and run) can take."""
    possible = faults_for(replicated, compaction, hosts)
    if text is None or text == "all":
        return possible
    names = [n.strip() for n in text.split(",") if n.strip()]
    if not names:
        raise ValueError("--faults names no fault")
    for n in names:
        if n not in CATALOGUE:
            raise ValueError(f"unknown fault {n!r}; the catalogue: {', '.join(CATALOGUE)}")
        if n in COMPACTION_FAULTS and not compaction:
            raise ValueError(f"fault {n!r} needs compaction rounds during the run (--compaction-every)")
        if n in HOST_FAULTS and not hosts:
            raise ValueError(f"fault {n!r} needs real hosts (deploy/chaos_hosts.py runs on the test hosts)")
        if n in SIMULATED_FAULTS and hosts:
            raise ValueError(f"fault {n!r} needs a simulated cluster (its nodes' disks and GCS on this machine)")
        if n not in possible:
            raise ValueError(f"fault {n!r} needs a replicated deployment (--nodes 3, or the test hosts)")
    return sorted(set(names), key=list(CATALOGUE).index)


@dataclass(frozen=True)
class PlannedFault:
    at: float  # seconds after the faults start
    name: str
    group: int  # index of the group whose coordinator (or consumers) it aims at
    duration: float  # pause or down time, seconds
    pick: int = 0  # which member/follower among the candidates (modulo their number)
    details: dict = field(default_factory=dict, compare=False)


def schedule(seed: int, seconds: float, rate_per_min: float, faults: list[str], groups: int,
             pause_s: tuple[float, float] = (4.0, 7.0), down_s: tuple[float, float] = (1.0, 3.0)) -> list[PlannedFault]:
    """The faults of a run, in start order. ``pause_s`` bounds SIGSTOP times (longer than a failover),
    ``down_s`` how long a killed node stays down."""
    if not faults:
        return []
    rng = random.Random(seed)
    weights = [CATALOGUE[f][2] for f in faults]
    out: list[PlannedFault] = []
    t = 0.0
    while True:
        t += rng.expovariate(rate_per_min / 60.0)
        if t >= seconds:
            return out
        name = rng.choices(faults, weights)[0]
        lo, hi = pause_s if name in ("leader-pause", "consumer-pause", "host-pause") else \
            HEAD_DOWN_S if name in ("head-restart", "head-isolate") else down_s
        out.append(PlannedFault(round(t, 3), name, rng.randrange(groups), round(rng.uniform(lo, hi), 3),
                                rng.randrange(1 << 16)))
