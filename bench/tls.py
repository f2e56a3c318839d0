"""What Ray's TLS costs raygroups: the same measurements on a local Ray with and without ``RAY_USE_TLS``.

Ray encrypts its gRPC channels (GCS, raylets, workers, Ray client) when every process starts with
``RAY_USE_TLS=1`` and ``RAY_TLS_SERVER_CERT``/``RAY_TLS_SERVER_KEY``/``RAY_TLS_CA_CERT``; this bench
generates a CA and a node certificate with ``openssl`` (what a deployment would do once), then, in a fresh
process per mode (the variables must be set before Ray starts), measures:

* Ray's start (``ray.init`` of a local Ray);
* a no-op actor call, one at a time (p50/p99) -- the floor of every request to a shard;
* 2 000 no-op calls issued at once (throughput);
* offset commits to an embedded deployment (``start_local``, one partition), one at a time (p50/p99).

The modes alternate (plain, tls, plain, tls) so that a machine's drift shows as a spread, not as a cost.
Writes ``bench/results/tls.json``. Run: ``.venv/bin/python bench/tls.py [--rounds 2]``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

RESULTS = Path(__file__).resolve().parent / "results"
CALLS = 2_000
COMMITS = 500


def make_certificates(directory: Path) -> dict[str, str]:
    """A CA and a certificate for this machine (its Ray address, 127.0.0.1 and its name), signed by it: Ray's
    TLS variables. Without the address Ray's processes use in the certificate, they cannot reach the GCS
    (found on the way: gRPC's hostname check fails and ``ray.init`` waits for the GCS for ever)."""
    def openssl(*args: str) -> None:
        subprocess.run(["openssl", *args], check=True, capture_output=True)

    ca_key, ca_cert = directory / "ca.key", directory / "ca.crt"
    key, csr, cert = directory / "node.key", directory / "node.csr", directory / "node.crt"
    openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=raygroups-bench-ca",
            "-keyout", str(ca_key), "-out", str(ca_cert))
    openssl("req", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=raygroups-node", "-keyout", str(key),
            "-out", str(csr))
    san = directory / "san.ext"
    from ray.util import get_node_ip_address  # the address Ray's processes connect to (gRPC checks it)

    san.write_text(f"subjectAltName=IP:127.0.0.1,IP:{get_node_ip_address()},DNS:localhost,DNS:{platform.node()}\n")
    openssl("x509", "-req", "-in", str(csr), "-CA", str(ca_cert), "-CAkey", str(ca_key), "-CAcreateserial",
            "-days", "1", "-extfile", str(san), "-out", str(cert))
    return {"RAY_USE_TLS": "1", "RAY_TLS_SERVER_CERT": str(cert), "RAY_TLS_SERVER_KEY": str(key),
            "RAY_TLS_CA_CERT": str(ca_cert)}


def _percentiles(samples: list[float]) -> dict[str, float]:
    from raygroups.stats import percentile

    return {"p50_ms": round(percentile(samples, 0.5) * 1000, 3), "p99_ms": round(percentile(samples, 0.99) * 1000, 3)}


def measure() -> dict:
    """One mode's measurements, in this process (its environment says whether Ray uses TLS)."""
    import logging

    import ray

    from raygroups import Errors
    from raygroups.deployment.start import start_local

    started = time.perf_counter()
    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False,
             logging_level=logging.WARNING)
    init_s = time.perf_counter() - started

    @ray.remote
    class Noop:
        def ping(self) -> int:
            return 0

    actor = Noop.remote()
    ray.get(actor.ping.remote())
    single = []
    for _ in range(CALLS):
        t = time.perf_counter()
        ray.get(actor.ping.remote())
        single.append(time.perf_counter() - t)
    t = time.perf_counter()
    ray.get([actor.ping.remote() for _ in range(CALLS)])
    burst_s = time.perf_counter() - t

    with tempfile.TemporaryDirectory() as data:
        cluster = start_local(num_partitions=1, data_dir=data)
        cluster.create_topic("t", 1)
        client = cluster.client()
        commits = []
        for i in range(COMMITS):
            t = time.perf_counter()
            r = client.commit_offsets(group_id="g", offsets={("t", 0): (i, "")}).result(30)
            commits.append(time.perf_counter() - t)
            assert r.errors[("t", 0)] is Errors.NONE
        cluster.shutdown()
    ray.shutdown()
    return {"ray_init_s": round(init_s, 2), "noop_call": _percentiles(single),
            "noop_calls_per_s": round(CALLS / burst_s), "commit": _percentiles(commits)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=2, help="alternations of plain and TLS (default 2)")
    parser.add_argument("--measure", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.measure:
        print(json.dumps(measure()))
        return 0
    if not 1 <= args.rounds <= 10:
        parser.error(f"--rounds must be 1..10, got {args.rounds}")
    runs: dict[str, list[dict]] = {"plain": [], "tls": []}
    with tempfile.TemporaryDirectory() as certs:
        tls_env = make_certificates(Path(certs))
        for round_ in range(args.rounds):
            for mode in ("plain", "tls"):
                env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_TLS") and k != "RAY_USE_TLS"}
                if mode == "tls":
                    env.update(tls_env)
                print(f"round {round_ + 1}/{args.rounds}: {mode} ...", flush=True)
                done = subprocess.run([sys.executable, __file__, "--measure"], env=env, capture_output=True,
                                      text=True, timeout=300)
                if done.returncode != 0:
                    raise SystemExit(f"{mode} run failed: {done.stderr.strip()[-2000:]}")
                runs[mode].append(json.loads(done.stdout.strip().splitlines()[-1]))
                print(f"  {runs[mode][-1]}", flush=True)

    def best(mode: str, key: str, sub: str | None = None) -> float:
        values = [r[key][sub] if sub else r[key] for r in runs[mode]]
        return max(values) if key == "noop_calls_per_s" else min(values)

    summary = {
        "noop_call_p50_ms": {m: best(m, "noop_call", "p50_ms") for m in runs},
        "noop_calls_per_s": {m: best(m, "noop_calls_per_s") for m in runs},
        "commit_p50_ms": {m: best(m, "commit", "p50_ms") for m in runs},
        "commit_p99_ms": {m: best(m, "commit", "p99_ms") for m in runs},
        "ray_init_s": {m: best(m, "ray_init_s") for m in runs},
    }
    out = {"bench": "tls", "machine": {"cpus": os.cpu_count(), "python": platform.python_version(),
                                       "platform": platform.platform()},
           "calls": CALLS, "commits": COMMITS, "runs": runs, "best_of_rounds": summary}
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "tls.json").write_text(json.dumps(out, indent=2, sort_keys=True) + "\n")
    print(json.dumps(summary, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
