"""Compaction rounds beside a chaos run (``--compaction-every S``), and what the nemesis needs to strike them.

The rounds are the operator's own watch mode, ``raygroups compact --every S --min-dirty-ratio 0 --json``, run
as a process of its own against the run's deployment, which a supervisor starts again whenever it dies (as
systemd's ``Restart=always`` would). Each round is a ``compact`` operation of the ``compaction`` process in the
history: invoked at the round's first progress line; ``ok`` once its report is out, with what it did (the
partitions swapped, the swaps refused, the partitions in error, any swap without a proof); ``info`` when the
process died in the middle of it, or the round failed as a whole.

The watch process tells where a round is by its progress lines (``{"step", "done", "total"}`` on stderr with
``--json``): ``compaction-kill`` strikes at the point its fault's pick chooses (``KILL_POINTS``), and
``compaction-failover`` between a round's proof and its swaps (``about_to_swap``, which names the partitions
the round is about to swap).
"""

from __future__ import annotations

import collections
import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

from raygroups.chaos.workload import EventLog

COMPACTION_PROCESS = "compaction"
RESTART_DELAY_S = 1.0  # a supervisor's pause before it starts the job again (systemd's RestartSec)
STOP_TIMEOUT_S = 10.0
# How much longer than a round's period a fault waits for a round to reach its point (the first round needs
# its Spark session started, which takes 20 s or more on a loaded machine).
ROUND_WAIT_S = 120.0
# A smaller segment than Kafka's 100 MiB when the run did not choose one, so that a run of minutes closes
# segments for the rounds to compact.
CHAOS_SEGMENT_BYTES = 16 * 1024


def is_proof(step: dict) -> bool:
    """The progress line that ends a round's Spark job: every partition's equivalence proof is in."""
    return step.get("step") == "compact" and step.get("total", 0) > 0 and step.get("done") == step.get("total")


def about_to_swap(step: dict) -> bool:
    """The progress line between a round's proof and its swaps, naming partitions it is about to swap."""
    return step.get("step") == "swap" and step.get("done") == 0 and bool(step.get("proved"))


# Where compaction-kill strikes, by its fault's pick: what the report calls it, and the progress line after
# which the process is killed.
KILL_POINTS: tuple[tuple[str, Callable[[dict], bool]], ...] = (
    ("in its Spark job", lambda s: s.get("step") == "compact" and s.get("done", 0) < s.get("total", 0)),
    ("after its proof, before its swaps", about_to_swap),
    ("between two swaps", lambda s: s.get("step") == "swap" and 0 < s.get("done", 0) < s.get("total", 0)),
)


def round_summary(report: dict) -> dict:
    """What a round's JSON report says, for the history: per partition, swapped, refused or in error."""
    if "partitions" not in report:
        return {"ok": False, "error": str(report.get("error", "no report"))}
    rows = report["partitions"]
    errors = {str(r["partition"]): str(r["error"]) for r in rows if r.get("error")}
    return {
        "ok": bool(report.get("ok")),
        "run_id": report.get("run_id"),
        "swapped": sorted(r["partition"] for r in rows if r.get("swapped")),
        "refused": {p: e for p, e in errors.items() if e.startswith("swap refused")},
        "errors": {p: e for p, e in errors.items() if not e.startswith("swap refused")},
        "unproved_swaps": sorted(r["partition"] for r in rows if r.get("swapped") and not r.get("equivalent")),
        "records_in": sum(int(r.get("records_in", 0)) for r in rows),
        "records_out": sum(int(r.get("records_out", 0)) for r in rows),
        "seconds": report.get("seconds"),
    }


class CompactionRounds:
    """The supervised watch process (see the module docstring). ``start`` it once the deployment serves,
    ``stop`` it before the audit; its ``events`` join the history."""

    def __init__(self, address: str, namespace: str, every_s: float, t0: float, log_path: str,
                 storage_uri: str | None = None) -> None:
        self.address = address
        self.namespace = namespace
        self.every_s = every_s
        self.storage_uri = storage_uri
        self.events = EventLog(COMPACTION_PROCESS, t0)
        self.log_path = log_path
        self.starts = 0  # processes started: 1 + the supervisor's restarts
        self._cond = threading.Condition()
        self._recent: collections.deque = collections.deque(maxlen=256)  # (seq, round, progress line)
        self._seq = 0
        self._round = 0  # rounds opened so far
        self._open = False
        self._stopping = False
        self._process: subprocess.Popen | None = None
        self._readers: list[threading.Thread] = []
        self._supervisor: threading.Thread | None = None
        self._log = open(log_path, "a", encoding="utf-8", buffering=1)  # noqa: SIM115 - closed by stop()

    # --- the process and its supervisor ------------------------------------------------------------
    def command(self) -> list[str]:
        # --verbose: Spark's and Ray's own lines go to the log beside the run (a failed round's why).
        # A round stuck past three periods (at least 3 minutes) has its Spark jobs cancelled (--round-timeout).
        cmd = [sys.executable, "-m", "raygroups", "compact", "--address", self.address, "--namespace",
               self.namespace, "--every", f"{self.every_s:g}s", "--min-dirty-ratio", "0", "--json", "--verbose",
               "--round-timeout", f"{max(3 * self.every_s, 180):g}s"]
        return cmd + (["--storage-uri", self.storage_uri] if self.storage_uri else [])

    def start(self) -> None:
        self._spawn()
        self._supervisor = threading.Thread(target=self._supervise, name="compaction-supervisor", daemon=True)
        self._supervisor.start()

    def _spawn(self) -> None:
        # A session (and process group) of its own: a kill takes the Spark driver's JVM with it.
        process = subprocess.Popen(self.command(), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                   stderr=subprocess.PIPE, text=True, bufsize=1, start_new_session=True)
        self._process = process
        self.starts += 1
        self._readers = [threading.Thread(target=self._read, args=(process.stdout, self._on_stdout), daemon=True),
                         threading.Thread(target=self._read, args=(process.stderr, self._on_stderr), daemon=True)]
        for t in self._readers:
            t.start()

    def _supervise(self) -> None:
        while True:
            process = self._process
            code = process.wait()
            for t in self._readers:  # every line it wrote is taken in before its death is
                t.join(timeout=10)
            with self._cond:
                if self._open:
                    why = "stopped at the end of the run" if self._stopping else \
                        f"the compaction job died in the middle of the round (exit {code})"
                    self._close("info", {"error": why})
                if self._stopping:
                    return
            time.sleep(RESTART_DELAY_S)
            with self._cond:
                if self._stopping:
                    return
                self._log.write(f"--- restarting the compaction job (it exited with {code})\n")
                self._spawn()

    def stop(self) -> None:
        """Stop the watch (SIGTERM to its process group, then SIGKILL if it does not end within
        ``STOP_TIMEOUT_S``: a round in flight is left as a kill would leave it); once."""
        with self._cond:
            if self._stopping:
                return
            self._stopping = True
            self._cond.notify_all()
            process = self._process
        if process is not None and process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGTERM)
            try:
                process.wait(timeout=STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                self.kill()
        if self._supervisor is not None:
            self._supervisor.join(timeout=STOP_TIMEOUT_S)
        self._log.close()

    def kill(self) -> int | None:
        """SIGKILL the job's whole process group; its pid (None if it was not running)."""
        process = self._process
        if process is None or process.poll() is not None:
            return None
        try:
            os.killpg(process.pid, signal.SIGKILL)
        except ProcessLookupError:
            return None
        return process.pid

    # --- what the process says ---------------------------------------------------------------------
    def _read(self, stream: Any, on_line: Callable[[str], None]) -> None:
        for line in stream:
            on_line(line.rstrip("\n"))

    def _on_stderr(self, line: str) -> None:
        step = _json_object(line)
        if step is None or "step" not in step:
            self._log.write(line + "\n")
            return
        with self._cond:
            if not self._open:
                self._round += 1
                self._open = True
                self.events.add("invoke", "compact", {"round": self._round})
            self._seq += 1
            self._recent.append((self._seq, self._round, step))
            self._cond.notify_all()

    def _on_stdout(self, line: str) -> None:
        report = _json_object(line)
        if report is None:
            self._log.write(line + "\n")
            return
        with self._cond:
            if not self._open:  # a round that failed before its first progress line
                self._round += 1
                self._open = True
                self.events.add("invoke", "compact", {"round": self._round})
            summary = round_summary(report)
            self._close("ok" if "partitions" in report else "info", summary)

    def _close(self, type_: str, value: dict) -> None:
        self.events.add(type_, "compact", {"round": self._round, **value})
        self._open = False
        self._cond.notify_all()

    # --- for the nemesis ---------------------------------------------------------------------------
    def wait_for(self, reached: Callable[[dict], bool], timeout_s: float) -> tuple[int, dict] | None:
        """Block until a progress line from now on satisfies ``reached``: its round and the line (None after
        ``timeout_s``, or once the run stops the rounds)."""
        deadline = time.monotonic() + timeout_s
        with self._cond:
            seen = self._seq
            while not self._stopping:
                for seq, round_, step in self._recent:
                    if seq > seen and reached(step):
                        return round_, step
                    seen = max(seen, seq)
                left = deadline - time.monotonic()
                if left <= 0:
                    return None
                self._cond.wait(left)
        return None


def _json_object(line: str) -> dict | None:
    try:
        value = json.loads(line)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def compaction_summary(history: Any) -> dict | None:
    """The report's ``compaction`` section (None when the run had no compaction rounds): the rounds, what they
    swapped, and each compaction fault's effect on the round it struck."""
    rounds = {op.invoke.value.get("round"): op for op in history.operations
              if op.process == COMPACTION_PROCESS and op.f == "compact"}
    if not rounds:
        return None
    done = [op.complete.value for op in rounds.values() if op.type == "ok"]
    effects = []
    for ev in history.faults:
        if ev.f not in ("compaction-kill", "compaction-failover"):
            continue
        n = ev.value.get("round")
        effects.append({"fault": ev.f, "time": round(ev.time, 3), "round": n,
                        "effect": _effect(ev.f, ev.value, rounds.get(n), rounds.get(n + 1) if n else None)})
    return {
        "rounds": len(rounds),
        "rounds_completed": len(done),
        "rounds_ok": sum(1 for v in done if v.get("ok")),
        "rounds_cut_short": sum(1 for op in rounds.values() if op.type != "ok"),
        "swaps": sum(len(v.get("swapped") or []) for v in done),
        "swaps_refused": sum(len(v.get("refused") or {}) for v in done),
        "partition_errors": sum(len(v.get("errors") or {}) for v in done),
        "records_in": sum(int(v.get("records_in") or 0) for v in done),
        "records_out": sum(int(v.get("records_out") or 0) for v in done),
        "effects": effects,
    }


def _outcome(op: Any) -> str:
    if op is None:
        return "never ran"
    if op.type != "ok":
        return f"cut short ({op.to_dict()['value'].get('error', 'no report')})"
    value = op.complete.value
    swapped = value.get("swapped") or []
    return (f"{'ok' if value.get('ok') else 'not ok'}: {len(swapped)} partition(s) swapped"
            + (f", {len(value['refused'])} swap(s) refused" if value.get("refused") else "")
            + (f", {len(value['errors'])} partition(s) in error" if value.get("errors") else ""))


def _effect(fault: str, target: dict, struck: Any, following: Any) -> str:
    n = target.get("round")
    if fault == "compaction-kill":
        return (f"round {n} killed {target.get('where', '')}: {_outcome(struck)}; the job was started again, "
                f"round {n + 1}: {_outcome(following)}")
    p = str(target.get("partition"))
    if struck is None or struck.type != "ok":
        return f"partition {p}'s leader killed after round {n}'s proof; round {n}: {_outcome(struck)}"
    value = struck.complete.value
    if p in (value.get("refused") or {}):
        return f"partition {p}'s swap in round {n} met its new leader and was refused: {value['refused'][p]}"
    if int(p) in (value.get("swapped") or []):
        return f"partition {p} was swapped in round {n} before its leader died (the kill came too late)"
    return f"partition {p} in round {n}: {(value.get('errors') or {}).get(p, 'nothing to swap')}"
