"""One Ray and one Spark session (raydp) for all the Spark test modules: starting Spark costs about 20 s
and its first query as much again, so the modules share it."""

from __future__ import annotations

import logging

import pytest


@pytest.fixture(scope="package")
def spark():
    import ray

    from raygroups.compaction.spark_session import spark_session, stop_spark_session

    started = not ray.is_initialized()
    if started:
        ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False, logging_level=logging.WARNING)
    session = spark_session()
    yield session
    stop_spark_session()
    if started:
        ray.shutdown()
