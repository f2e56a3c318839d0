"""Compaction rounds in a chaos run, on hand-made histories and a stand-in watch process: the compaction
faults come only with ``--compaction-every``; each round is a ``compact`` operation with what its report
says; the report tells each compaction fault's effect on the round it struck; a swap without a proof is a
violation; the supervisor starts a killed job again; and the audit compares replicas from the end of the
furthest compacted prefix (below it a replica may hold either proved version of a segment)."""

from __future__ import annotations

import json
import sys
from types import SimpleNamespace

import pytest

from raygroups.chaos import check
from raygroups.chaos.compaction import (
    KILL_POINTS,
    CompactionRounds,
    about_to_swap,
    compaction_summary,
    is_proof,
    round_summary,
)
from raygroups.chaos.faults import COMPACTION_FAULTS, faults_for, parse_faults, schedule
from raygroups.chaos.report import build_report
from tests.conditions import wait_for
from tests.unit.test_chaos_report import PARTITIONS, Timeline


def _report(rows: list[dict], ok: bool) -> dict:
    return {"ok": ok, "run_id": "r1", "seconds": 3.5, "partitions": rows}


def _row(p: int, swapped: bool = True, equivalent: bool = True, error: str | None = None, records=(10, 4)) -> dict:
    row = {"partition": p, "swapped": swapped, "equivalent": equivalent, "ok": error is None,
           "records_in": records[0], "records_out": records[1]}
    return row | ({"error": error} if error else {})


def test_the_compaction_faults_come_only_with_compaction_rounds():
    assert not set(COMPACTION_FAULTS) & set(faults_for(replicated=True))
    assert set(COMPACTION_FAULTS) <= set(faults_for(replicated=True, compaction=True))
    assert faults_for(replicated=False, compaction=True)[-1] == "compaction-kill"  # a failover needs replicas
    # The default mix of a run without compaction is what it was: a seed gives the same schedule.
    assert schedule(4242, 600, 18, faults_for(True), 3) == schedule(4242, 600, 18, parse_faults("all", True), 3)
    assert parse_faults("compaction-kill,shard-kill", True, compaction=True) == ["shard-kill", "compaction-kill"]
    with pytest.raises(ValueError, match="fault 'compaction-kill' needs compaction rounds during the run "
                                         r"\(--compaction-every\)"):
        parse_faults("compaction-kill", True)
    with pytest.raises(ValueError, match="fault 'compaction-failover' needs a replicated deployment"):
        parse_faults("compaction-failover", False, compaction=True)


def test_a_rounds_report_becomes_what_the_history_keeps():
    report = _report([_row(0), _row(1, swapped=False, error="swap refused: fenced by leader epoch 7"),
                      _row(2, swapped=False, error="upload failed: the actor died"), _row(3, swapped=False)], False)
    assert round_summary(report) == {
        "ok": False, "run_id": "r1", "swapped": [0], "refused": {"1": "swap refused: fenced by leader epoch 7"},
        "errors": {"2": "upload failed: the actor died"}, "unproved_swaps": [], "records_in": 40, "records_out": 16,
        "seconds": 3.5}
    assert round_summary({"ok": False, "error": "ConnectionError: the GCS did not answer"}) == {
        "ok": False, "error": "ConnectionError: the GCS did not answer"}


def test_the_kill_points_and_the_proof_are_read_from_the_progress_lines():
    in_job, after_proof, between_swaps = (reached for _, reached in KILL_POINTS)
    assert in_job({"step": "compact", "done": 0, "total": 3}) and not in_job({"step": "compact", "done": 3, "total": 3})
    assert is_proof({"step": "compact", "done": 3, "total": 3}) and not is_proof({"step": "upload", "done": 8,
                                                                                  "total": 8})
    # Between the proof and the swaps: the line that names the partitions about to be swapped (some).
    assert after_proof is about_to_swap and about_to_swap({"step": "swap", "done": 0, "total": 8, "proved": [2, 5]})
    assert not about_to_swap({"step": "swap", "done": 0, "total": 8, "proved": []})
    assert between_swaps({"step": "swap", "done": 1, "total": 8})
    assert not between_swaps({"step": "swap", "done": 8, "total": 8}) and not between_swaps({"step": "swap", "done": 0,
                                                                                            "total": 8})


def _compaction_run() -> Timeline:
    t = Timeline()
    t.op("compaction", "compact", 10.0, 14.0, round=1, **round_summary(_report([_row(0), _row(3)], True)))
    t.fault(21.0, "compaction-kill", round=2, where="in its Spark job", pid=77)
    t.op("compaction", "compact", 20.0, 21.0, "info", round=2, error="the compaction job died in the middle of the "
                                                                       "round (exit -9)")
    t.op("compaction", "compact", 30.0, 35.0, round=3, **round_summary(_report([_row(0), _row(3)], True)))
    t.fault(44.0, "compaction-failover", round=4, partition=3, pid=78, node="node-1")
    t.op("compaction", "compact", 40.0, 45.0, round=4, **round_summary(_report(
        [_row(0), _row(3, swapped=False, error="swap refused: fenced by leader epoch 9")], False)))
    t.fault(54.0, "compaction-failover", round=5, partition=3, pid=79, node="node-2")
    t.op("compaction", "compact", 50.0, 55.0, round=5, **round_summary(_report([_row(0), _row(3)], True)))
    return t


def test_the_report_tells_each_compaction_faults_effect_on_the_round_it_struck():
    history = _compaction_run().history()
    summary = compaction_summary(history)
    assert {k: v for k, v in summary.items() if k != "effects"} == {
        "rounds": 5, "rounds_completed": 4, "rounds_ok": 3, "rounds_cut_short": 1, "swaps": 7, "swaps_refused": 1,
        "partition_errors": 0, "records_in": 80, "records_out": 32}
    kill, refused, too_late = summary["effects"]
    assert kill == {"fault": "compaction-kill", "time": 21.0, "round": 2, "effect":
                    "round 2 killed in its Spark job: cut short (the compaction job died in the middle of the round "
                    "(exit -9)); the job was started again, round 3: ok: 2 partition(s) swapped"}
    assert refused["effect"] == ("partition 3's swap in round 4 met its new leader and was refused: swap refused: "
                                 "fenced by leader epoch 9")
    assert too_late["effect"] == "partition 3 was swapped in round 5 before its leader died (the kill came too late)"
    nemesis = SimpleNamespace(skipped={}, errors=[], disruptions=[])
    report = build_report(history, check(history), nemesis, SimpleNamespace(), 0.0,
                          {"coordinator_partitions": PARTITIONS, "group_partitions": {}})
    assert report["ok"] and report["compaction"] == summary
    assert "compaction" not in build_report(Timeline().probe_commit(1.0, 1.1).history(), check(history), nemesis,
                                            SimpleNamespace(), 0.0, {"coordinator_partitions": PARTITIONS,
                                                                     "group_partitions": {}})


def test_a_swap_without_a_proof_is_a_violation():
    t = _compaction_run()
    t.op("compaction", "compact", 60.0, 65.0, round=6,
         **round_summary(_report([_row(0), _row(3, equivalent=False)], True)))
    result = check(t.history())
    assert not result.ok
    (v,) = result.violations
    assert v.invariant == "swap-without-proof" and v.key == ("", "__consumer_offsets", 3)
    assert v.message.startswith("compaction round 6 swapped partition 3 without an equivalence proof that held")


FAKE_WATCH = """
import json, sys, time
print(json.dumps({"step": "spark", "done": 0, "total": 1}), file=sys.stderr, flush=True)
print("a line of Spark's noise", file=sys.stderr, flush=True)
for round_ in range(100):
    for done in range(4):
        print(json.dumps({"step": "compact", "done": done, "total": 3}), file=sys.stderr, flush=True)
        time.sleep(0.05)
    print(json.dumps({"step": "swap", "done": 0, "total": 1, "proved": [0]}), file=sys.stderr, flush=True)
    print(json.dumps({"ok": True, "run_id": f"r{round_}", "seconds": 0.2,
                      "partitions": [{"partition": 0, "swapped": True, "equivalent": True, "ok": True}]}), flush=True)
    time.sleep(0.2)
"""


def test_the_supervisor_starts_a_killed_job_again_and_the_history_says_which_round_died(tmp_path, monkeypatch):
    """A stand-in for ``raygroups compact --every`` that prints what the real one does: the rounds' progress
    lines on stderr, a report per round on stdout."""
    from raygroups.chaos.workload import clock

    script = tmp_path / "watch.py"
    script.write_text(FAKE_WATCH)
    monkeypatch.setattr(CompactionRounds, "command", lambda self: [sys.executable, str(script)])
    rounds = CompactionRounds("127.0.0.1:1", "ns", 1.0, clock(), str(tmp_path / "compaction.log"))
    rounds.start()
    try:
        hit = rounds.wait_for(about_to_swap, timeout_s=30)
        assert hit is not None and hit[1] == {"step": "swap", "done": 0, "total": 1, "proved": [0]}
        hit = rounds.wait_for(KILL_POINTS[0][1], timeout_s=30)
        assert hit is not None and rounds.kill() is not None
        killed = hit[0]
        wait_for(lambda: rounds.starts == 2, timeout_s=30, what="the job started again")
        assert rounds.wait_for(is_proof, timeout_s=30) is not None
    finally:
        rounds.stop()
    events = rounds.events.drain()
    ends = {e[4]["round"]: (e[2], e[4]) for e in events if e[2] != "invoke"}
    assert ends[killed][0] == "info" and ends[killed][1]["error"].startswith("the compaction job died in the middle")
    assert all(ends[n][0] == "ok" and ends[n][1]["swapped"] == [0] for n in ends if n < killed)
    assert [e[2] for e in events].count("invoke") == len(ends)  # every round opened was closed
    assert "a line of Spark's noise" in (tmp_path / "compaction.log").read_text()


def test_a_replicas_batches_are_compared_from_the_end_of_the_furthest_compacted_prefix():
    from raygroups.offsets_log.batch import epoch_runs

    class Log:
        def __init__(self, batches):
            self._batches = batches

        def batches(self, _from):
            return iter(self._batches)

    def batch(base: int, n: int, epoch: int, records: tuple):
        return SimpleNamespace(base_offset=base, last_offset=base + n - 1, next_offset=base + n, leader_epoch=epoch,
                               timestamp_ms=base, records=records, offset_deltas=tuple(range(n)),
                               last_offset_delta=n - 1)

    tail = [batch(10, 2, 3, ("c", "d")), batch(12, 2, 4, ("e", "f"))]
    original = Log([batch(0, 5, 3, ("a",) * 5), batch(5, 5, 3, ("b",) * 5), *tail])
    compacted = Log([batch(0, 10, 3, ("a", "b")), *tail])  # the same prefix, compacted into one batch
    assert epoch_runs(original) != epoch_runs(compacted)
    assert epoch_runs(original, from_offset=10) == epoch_runs(compacted, from_offset=10)
    assert epoch_runs(original, up_to_offset=12, from_offset=10) == [[3, 10, 12, epoch_runs(original, 12, 10)[0][3]]]
    assert json.dumps(epoch_runs(compacted, from_offset=14)) == "[]"
