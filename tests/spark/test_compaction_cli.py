"""``raygroups compact --local``, the newcomer's command, end to end in its own process: a local deployment
filled with synthetic commits is compacted and verified; stdout is the report, and Spark's and Ray's
console noise stays out of the terminal."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pyarrow.parquet as pq
import pytest

pytestmark = [pytest.mark.spark, pytest.mark.slow]


def test_compact_local_end_to_end():
    result = subprocess.run([sys.executable, "-m", "raygroups", "compact", "--local", "--json"],
                            capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout + result.stderr
    (line,) = result.stdout.strip().splitlines()
    report = json.loads(line)
    assert report["ok"] and report["verified"]
    assert {p["partition"] for p in report["partitions"]} == {0, 1, 2, 3}
    for p in report["partitions"]:
        assert p["equivalent"] and p["swapped"] and p["records_out"] < p["records_in"]
    assert pq.read_table(report["snapshot_path"]).num_rows == report["offsets"]
    for noise in ("log4j", "WARN Utils", "gcs_client", "NativeCodeLoader", "Traceback"):
        assert noise not in result.stderr, result.stderr
    assert os.path.isdir(report["data_dir"])
    shutil.rmtree(report["data_dir"])
