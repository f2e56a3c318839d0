"""The live terminal view of a chaos run (rich), and its end-of-run summary."""

from __future__ import annotations

import time
from typing import Any

from rich.console import Console, Group
from rich.live import Live
from rich.table import Table
from rich.text import Text


class LiveView:
    def __init__(self, stream: Any, enabled: bool = True) -> None:
        self.console = Console(file=stream, highlight=False, soft_wrap=True)
        self.enabled = enabled
        self._live: Live | None = None
        self._phase = "starting"
        self._started = time.monotonic()
        self._planned = 0

    def starting(self, options: Any, plan: list) -> None:
        self._planned = len(plan)
        where = f"the deployment at {options.address}" if options.address else (
            f"a simulated cluster of {options.nodes} coordinator nodes" if options.nodes > 1 else "a single-node Ray")
        self.console.print(f"[bold]raygroups chaos run[/bold]: seed {options.seed}, {options.seconds:g} s of faults "
                           f"({len(plan)} planned at {options.rate:g}/min), {options.groups} groups x "
                           f"{options.consumers} consumers ({options.group_protocol} protocol) on {where}; output in {options.out}/")
        if self.enabled:
            self._live = Live(console=self.console, refresh_per_second=2, transient=True)
            self._live.start()

    def phase(self, text: str) -> None:
        self._phase = text
        if self._live is None:
            self.console.print(f"[{time.monotonic() - self._started:6.1f}s] {text}")

    def update(self, workload: Any, nemesis: Any, faults: list) -> None:
        if self._live is None:
            return
        ops = workload.outcomes
        table = Table(box=None, pad_edge=False)
        table.add_column("group")
        table.add_column("protocol")
        table.add_column("generation / epoch", justify="right")
        table.add_column("consumers", justify="right")
        table.add_column("acknowledged commits", justify="right")
        for group, v in workload.group_views().items():
            table.add_row(group, v["protocol"], str(v["generation"]), str(v["consumers"]), str(v["commits"]))
        now = "now: " + (", ".join(f"{f.name} (group {f.group})" for f in faults) or "no fault")
        header = Text(f"{time.monotonic() - self._started:6.1f}s  {self._phase}\n"
                      f"faults injected {nemesis.injected} of {self._planned} planned; {now}\n"
                      f"operations completed: {ops['ok']} ok, {ops['fail']} failed, {ops['info']} unknown")
        self._live.update(Group(header, table))

    def close(self) -> None:
        if self._live is not None:
            self._live.stop()
            self._live = None

    def summary(self, result: Any) -> None:
        self.close()
        r = result.report
        fo, rec = r["failover"]["total_s"], r["recovery"]["total_s"]
        self.console.print(
            f"\n{r['faults_injected']} faults injected ({', '.join(f'{k} {v}' for k, v in sorted(r['faults'].items()))})"
            f"\n{r['operations']['ok']} operations acknowledged, {r['operations']['fail']} failed, "
            f"{r['operations']['info']} of unknown outcome; {r['commits']['ok']} commits "
            f"(p50 {r['commits']['latency_ms']['p50']} ms, p99 {r['commits']['latency_ms']['p99']} ms; a no-op actor "
            f"call: p50 {r['baseline']['noop_actor_call_ms']['p50']} ms)"
            f"\nfailover (kill -> first probe commit the new leader served): p50 {fo['p50']} s, p99 {fo['p99']} s, "
            f"max {fo['max']} s over {fo['count']} failovers"
            + (f" ({r['failover']['interrupted']} more interrupted by a later fault of their partition)"
               if r["failover"].get("interrupted") else "")
            + "; consumers' first commit after them: p50 "
            f"{r['failover']['consumers_s']['p50']} s, p99 {r['failover']['consumers_s']['p99']} s"
            + (f"\nrecovery after a full restart: p50 {rec['p50']} s, max {rec['max']} s over {rec['count']}"
               if rec["count"] else "")
            + f"\nrebalances {sum(r['rebalances'].values())}; records reprocessed {r['records_reprocessed']}")
        for name, kind in (("failover", "failovers"), ("recovery", "recoveries")):
            for fault, f in r[name]["by_fault"].items():
                t = f["total_s"]
                self.console.print(f"  {fault}: {t['count']} {kind}, p50 {t['p50']} s, p99 {t['p99']} s, max "
                                   f"{t['max']} s" + (f", {f['unserved']} unserved" if f["unserved"] else "")
                                   + (f", {f['interrupted']} interrupted by a later fault" if f.get("interrupted")
                                      else ""))
        for v in r["violations"][:20]:
            self.console.print(f"[red]VIOLATION {v['invariant']}[/red]: {v['message']}")
        verdict = "[green]valid: no invariant violated[/green]" if r["ok"] else \
            f"[red]invalid: {len(r['violations'])} violation(s)[/red]"
        self.console.print(f"checker ({len(r['invariants'])} invariants): {verdict}")
        self.console.print(f"history  {result.out}/history.jsonl\nreport   {result.out}/report.json\n"
                           f"timeline {result.out}/timeline.png, {result.out}/failover-cdf.png\n(Ray's own output: {result.out}/ray-output.log)")
