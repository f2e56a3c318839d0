"""A Jepsen-style matrix of short chaos runs: each fault mix under several seeds, a run each.

Jepsen's runs of Kafka-compatible systems repeat every mix of faults over many seeds, a fault every 10-15 s
over a few hundred seconds. This runs ``raygroups chaos run`` for every (mix, seed) in its own process and
folder (``<out>/<mix>-seed<seed>/``: history, report, pictures), then writes ``<out>/matrix.json`` and
``<out>/matrix.md``: per run the verdict, the faults carried out, failover p50/p99 and the unavailability the
probes saw; per mix the same over its seeds. A run whose report is already there is not run again, so an
interrupted matrix resumes where it stopped (``--tables-only`` just rewrites the tables).

Run: ``.venv/bin/python bench/chaos_matrix.py`` (the defaults: 6 mixes x 5 seeds x 300 s, about 3 h on 2
cores); ``--mixes kills,nodes --seeds 1,2 --seconds 120`` for a part of it.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results" / "chaos-matrix"

# name -> (faults, extra arguments of the run)
MIXES: dict[str, tuple[str, tuple[str, ...]]] = {
    "kills": ("shard-kill,shard-stop,leader-flap", ()),
    "pauses": ("leader-pause,consumer-pause,consumer-kill", ()),
    "nodes": ("node-kill,node-stop,node-restart,follower-loss,full-restart", ()),
    "disks": ("torn-tail,bit-flip,disk-full", ()),
    "control-plane": ("controller-kill,head-restart,shard-kill", ()),
    "compaction": ("compaction-kill,compaction-failover,shard-kill,node-kill", ("--compaction-every", "30s")),
    "all": ("all", ()),
}
DEFAULT_MIXES = ("kills", "pauses", "nodes", "disks", "control-plane", "compaction")
SEEDS = (1, 2, 3, 4, 5)
RATE = 5.0  # faults per minute: one every 12 s, as Jepsen's runs


def run_dir(out: Path, mix: str, seed: int) -> Path:
    return out / f"{mix}-seed{seed}"


def run_one(out: Path, mix: str, seed: int, seconds: float) -> dict:
    """One run in a process of its own (a fresh Ray each time); its report, or why there is none."""
    faults, extra = MIXES[mix]
    folder = run_dir(out, mix, seed)
    cmd = [sys.executable, "-m", "raygroups", "chaos", "run", "--seconds", f"{seconds:g}", "--seed", str(seed),
           "--rate", f"{RATE:g}", "--faults", faults, "--out", str(folder), *extra]
    started = time.monotonic()
    done = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, timeout=seconds * 4 + 900)
    (folder / "run.log").write_text(done.stdout + done.stderr)
    report = folder / "report.json"
    if not report.exists():
        return {"mix": mix, "seed": seed, "error": (done.stderr or done.stdout).strip().splitlines()[-1:]}
    (folder / "commit.txt").write_text(commit() + "\n")  # the code it ran
    pack(folder)
    return {"wall_s": round(time.monotonic() - started, 1), **row(mix, seed, json.loads(report.read_text()), folder)}


def pack(folder: Path) -> None:
    """Make a run's folder fit to commit: its history gzipped (8 MB of JSON lines become about 1 MB), and no
    absolute path of this machine in its report or log (the run's folder is named relative to the matrix's)."""
    history = folder / "history.jsonl"
    if history.exists():
        with history.open("rb") as src, gzip.open(folder / "history.jsonl.gz", "wb") as dst:
            shutil.copyfileobj(src, dst)
        history.unlink()
    absolute = re.compile(r"/[^\s\"',()]*/" + re.escape(folder.name))
    for name in ("report.json", "run.log"):
        path = folder / name
        if path.exists():
            path.write_text(absolute.sub(folder.name, path.read_text()))


def commit() -> str:
    done = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=ROOT)
    return done.stdout.strip() or "unknown"


def row(mix: str, seed: int, report: dict, folder: Path | None = None) -> dict:
    failover = report.get("failover") or {}
    total = failover.get("total_s") or {}
    unavailable = report.get("unavailability_s") or {}
    return {
        "mix": mix, "seed": seed, "valid": report.get("ok"),
        "violations": sorted({v["invariant"] for v in report.get("violations", [])}),
        "faults": sum((report.get("faults") or {}).values()),
        "faults_planned": sum((report.get("faults_planned") or {}).values()),
        "failovers": total.get("count", 0), "failover_p50_s": total.get("p50"), "failover_p99_s": total.get("p99"),
        "unserved": failover.get("unserved", 0), "interrupted": failover.get("interrupted", 0),
        "unavailable_s_max_partition": max(unavailable.values(), default=0.0),
        "commits": (report.get("commits") or {}).get("ok"),
        "nemesis_errors": len(report.get("nemesis_errors") or []),
        "compaction_rounds": (report.get("compaction") or {}).get("rounds_completed"),
        "commit": (folder / "commit.txt").read_text().strip() if folder and (folder / "commit.txt").exists() else None,
    }


def summarize(rows: list[dict]) -> dict:
    by_mix: dict[str, list[dict]] = {}
    for r in rows:
        by_mix.setdefault(r["mix"], []).append(r)
    out = {}
    for mix, rs in by_mix.items():
        done = [r for r in rs if "error" not in r]
        p99s = [r["failover_p99_s"] for r in done if r["failover_p99_s"] is not None]
        out[mix] = {"runs": len(rs), "valid": sum(1 for r in done if r["valid"]), "faults": sum(r["faults"] for r in done),
                    "failover_p99_s_worst": max(p99s, default=None),
                    "violations": sorted({v for r in done for v in r["violations"]})}
    return out


def write_tables(out: Path, rows: list[dict], seconds: float) -> None:
    machine = {"cpus": os.cpu_count(), "python": platform.python_version(), "platform": platform.platform()}
    summary = summarize(rows)
    (out / "matrix.json").write_text(json.dumps({"machine": machine, "seconds_per_run": seconds, "rate_per_min": RATE,
                                                 "mixes": {m: MIXES[m][0] for m in summary}, "summary": summary,
                                                 "runs": rows}, indent=1, sort_keys=True))
    lines = [f"# Chaos matrix: {len(rows)} run(s) of {seconds:g} s, {RATE:g} faults/min", "",
             f"Machine: {machine['cpus']} cores, Python {machine['python']}, {machine['platform']}.", "",
             "| mix | faults in the mix | runs | valid | faults carried out | worst failover p99 | violations |",
             "|---|---|---|---|---|---|---|"]
    for mix, s in summary.items():
        worst = "-" if s["failover_p99_s_worst"] is None else f"{s['failover_p99_s_worst']:.2f} s"
        lines.append(f"| {mix} | {MIXES[mix][0]} | {s['runs']} | {s['valid']}/{s['runs']} | {s['faults']} | {worst} | "
                     f"{', '.join(s['violations']) or 'none'} |")
    lines += ["", "| run | code | valid | faults (planned) | failovers | p50 | p99 | max unavailable (s, one "
              "partition) | commits |", "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        if "error" in r:
            lines.append(f"| {r['mix']}-seed{r['seed']} | | no report: {' '.join(r['error'])} | | | | | | |")
            continue

        def s(v):
            return "-" if v is None else f"{v:.2f}"

        lines.append(f"| {r['mix']}-seed{r['seed']} | {r.get('commit') or '-'} | {'yes' if r['valid'] else 'NO'} | "
                     f"{r['faults']} "
                     f"({r['faults_planned']}) | {r['failovers']} | {s(r['failover_p50_s'])} | {s(r['failover_p99_s'])} | "
                     f"{s(r['unavailable_s_max_partition'])} | {r['commits']} |")
    (out / "matrix.md").write_text("\n".join(lines) + "\n")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mixes", default=",".join(DEFAULT_MIXES), help=f"of {', '.join(MIXES)}")
    parser.add_argument("--seeds", default=",".join(map(str, SEEDS)))
    parser.add_argument("--seconds", type=float, default=300.0)
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument("--tables-only", action="store_true", help="Rewrite the tables from the runs there are.")
    args = parser.parse_args(argv)
    mixes = [m.strip() for m in args.mixes.split(",") if m.strip()]
    unknown = [m for m in mixes if m not in MIXES]
    if unknown:
        parser.error(f"unknown mix {unknown[0]!r}; the mixes: {', '.join(MIXES)}")
    try:
        seeds = [int(s) for s in args.seeds.split(",") if s.strip()]
    except ValueError:
        parser.error(f"--seeds must be integers separated by commas, got {args.seeds!r}")
    if not 10 <= args.seconds <= 3600:
        parser.error(f"--seconds must be 10..3600, got {args.seconds:g}")
    args.out.mkdir(parents=True, exist_ok=True)
    rows = []
    todo = [(m, s) for m in mixes for s in seeds]
    for i, (mix, seed) in enumerate(todo, 1):
        report = run_dir(args.out, mix, seed) / "report.json"
        if report.exists():
            pack(report.parent)  # (a run of before packing, or one interrupted after its report)
            rows.append(row(mix, seed, json.loads(report.read_text()), report.parent))
            continue
        if args.tables_only:
            continue
        print(f"[{i}/{len(todo)}] {mix} seed {seed}: {args.seconds:g} s of {MIXES[mix][0]}", flush=True)
        rows.append(run_one(args.out, mix, seed, args.seconds))
        r = rows[-1]
        print(f"    {'valid' if r.get('valid') else 'NOT VALID'}; {r.get('faults', 0)} faults, failover p99 "
              f"{r.get('failover_p99_s')} s", flush=True)
        write_tables(args.out, rows, args.seconds)
    write_tables(args.out, rows, args.seconds)
    print(f"tables: {args.out / 'matrix.md'}")
    return 0 if rows and all(r.get("valid") for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
