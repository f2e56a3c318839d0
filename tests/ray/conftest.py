"""One local Ray for the whole suite; every test gets its own deployment (namespace)."""

from __future__ import annotations

import uuid

import pytest

from tests.conditions import wait_for  # noqa: F401  (re-exported for the test modules)

# Ray's metrics agent exports every 10 s by default: once a second, so a scrape sees new series soon.
METRICS_EVERY_SECOND = {"metrics_report_interval_ms": 1000}

CONFIG = {
    "group.initial.rebalance.delay.ms": 0,
    "group.min.session.timeout.ms": 10,
    "request.timeout.ms": 20_000,
    # KIP-848 members heartbeat at the coordinator's interval (5 s by default).
    "group.consumer.heartbeat.interval.ms": 500, "group.consumer.min.heartbeat.interval.ms": 100,
}


@pytest.fixture(scope="session")
def ray_session():
    import ray

    started = not ray.is_initialized()
    if started:
        ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False, _system_config=METRICS_EVERY_SECOND)
    yield
    if started:
        ray.shutdown()


@pytest.fixture
def cluster(ray_session, tmp_path):
    import ray

    from raygroups.deployment.start import start_local

    if not ray.is_initialized():  # a multi-node module shut the shared Ray down: start it again
        ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False, _system_config=METRICS_EVERY_SECOND)

    c = start_local(num_partitions=4, data_dir=tmp_path / "data", config=CONFIG,
                    namespace=f"test-{uuid.uuid4().hex[:8]}")
    yield c
    c.shutdown()
