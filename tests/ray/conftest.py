"""One local Ray for the whole suite; every test gets its own deployment (namespace)."""

from __future__ import annotations

import time
import uuid

import pytest

CONFIG = {
    "group.initial.rebalance.delay.ms": 0,
    "group.min.session.timeout.ms": 10,
    "request.timeout.ms": 20_000,
}


@pytest.fixture(scope="session")
def ray_session():
    import ray

    started = not ray.is_initialized()
    if started:
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield
    if started:
        ray.shutdown()


@pytest.fixture
def cluster(ray_session, tmp_path):
    import ray

    from raygroups.cluster import start_local

    if not ray.is_initialized():  # a multi-node module shut the shared Ray down: start it again
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)

    c = start_local(num_partitions=4, data_dir=tmp_path / "data", config=CONFIG,
                    namespace=f"test-{uuid.uuid4().hex[:8]}")
    yield c
    c.shutdown()


def wait_for(condition, timeout_s=30.0, interval_s=0.05, what="condition"):
    """Poll ``condition`` until it returns a truthy value or the deadline passes (never a fixed sleep)."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s}s waiting for {what}")
        time.sleep(interval_s)
