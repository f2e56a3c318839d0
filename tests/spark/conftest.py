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
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, logging_level=logging.WARNING)
    session = spark_session()
    # Adaptive query execution re-plans the query after each of the job's shuffle stages: about 0.5 s a stage
    # on these small inputs (a run's survivors took 9 s with it, 4 s without, on this 2-core machine), and
    # it changes no result. These modules run without it; the CLI's end-to-end run and the replicated
    # compaction test keep the shipped configuration (with it).
    session.conf.set("spark.sql.adaptive.enabled", "false")
    yield session
    stop_spark_session()
    if started:
        ray.shutdown()
