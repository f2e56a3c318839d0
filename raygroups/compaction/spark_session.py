"""One Spark session per process, on the connected Ray cluster through raydp, set up for Java 17.

``spark_session()`` starts it once (tens of seconds, and a first query pays JVM warm-up) and hands the same
session to every later caller; ``stop_spark_session()`` ends it. The Spark master actors are pinned to the
head node so they do not die with a coordinator node; executors are few and small by default (a 2-core
machine runs the coordinator too). Without a usable Java, ``JavaMissingError`` says what to install, in one
sentence, before any JVM is started.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
from typing import Any

from raygroups.deployment.seam import HEAD_RESOURCE

log = logging.getLogger(__name__)

# raydp needs these on Java 17 for the driver, the executors and its app master (Spark's own launcher adds
# them only for the driver it starts itself).
JAVA_OPENS = " ".join(
    ["-XX:+IgnoreUnrecognizedVMOptions"]
    + [f"--add-opens=java.base/{pkg}=ALL-UNNAMED" for pkg in (
        "java.lang", "java.lang.invoke", "java.io", "java.net", "java.nio", "java.math", "java.text", "java.util",
        "java.util.concurrent", "java.util.concurrent.atomic", "sun.nio.ch", "sun.nio.cs", "sun.security.action",
        "sun.util.calendar")]
)
MIN_JAVA = 17
DEFAULT_EXECUTORS = 1
DEFAULT_EXECUTOR_CORES = 1
DEFAULT_EXECUTOR_MEMORY = "1g"

_lock = threading.Lock()
_session: Any = None
_session_ray: tuple[str, str] | None = None  # the Ray cluster _session runs on (GCS address, session name)


class JavaMissingError(RuntimeError):
    """Spark cannot start: no Java, or one older than Spark 3.5 on raydp needs."""


def java_problem() -> str | None:
    """None when a Java >= 17 is found (``JAVA_HOME`` first, then ``PATH``), else the sentence to show."""
    home = os.environ.get("JAVA_HOME")
    java = os.path.join(home, "bin", "java") if home else shutil.which("java")
    if not java or not os.path.exists(java):
        return (f"the Spark compaction job needs Java {MIN_JAVA} or newer, and no 'java' was found "
                f"(install a JDK, e.g. 'apt-get install openjdk-17-jdk-headless', or set JAVA_HOME)")
    try:
        out = subprocess.run([java, "-version"], capture_output=True, text=True, timeout=30).stderr
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"the Spark compaction job needs Java {MIN_JAVA} or newer, and {java} -version failed: {e}"
    m = re.search(r'version "(\d+)', out)
    major = int(m.group(1)) if m else 0
    if major < MIN_JAVA:
        return (f"the Spark compaction job needs Java {MIN_JAVA} or newer, and {java} is Java {major or 'unknown'} "
                f"(install openjdk-17 and put it first on PATH, or set JAVA_HOME)")
    return None


def spark_configs(executor_memory: str = DEFAULT_EXECUTOR_MEMORY, verbose: bool = False,
                  executor_resources: dict[str, float] | None = None) -> dict[str, str]:
    configs = {
        "spark.driver.extraJavaOptions": JAVA_OPENS,
        "spark.executor.extraJavaOptions": JAVA_OPENS,
        "spark.ray.raydp_app_master.extraJavaOptions": JAVA_OPENS,
        # The master actors live on the head node: a coordinator node's death must not end the session.
        f"spark.ray.raydp_spark_master.actor.resource.{HEAD_RESOURCE}": "0.001",
        "spark.driver.memory": executor_memory,
        "spark.sql.shuffle.partitions": "8",
        "spark.default.parallelism": "8",
        # Adaptive query execution re-plans after every shuffle stage; the job's stages are few and its
        # shuffle partitions fixed, and without it the job ran faster at every size measured
        # (bench/results/compaction-adaptive.json: 200 k records 8.6 s against 13.3 s, 1 M 20.2 s against 23.1 s).
        "spark.sql.adaptive.enabled": "false",
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "true" if verbose else "false",
        "spark.sql.execution.arrow.pyspark.enabled": "true",
        "spark.python.worker.reuse": "true",
    }
    for resource, amount in (executor_resources or {}).items():
        configs[f"spark.ray.raydp_spark_executor.actor.resource.{resource}"] = str(amount)
    return configs


def spark_session(*, executors: int = DEFAULT_EXECUTORS, executor_cores: int = DEFAULT_EXECUTOR_CORES,
                  executor_memory: str = DEFAULT_EXECUTOR_MEMORY, verbose: bool = False,
                  executor_resources: dict[str, float] | None = None) -> Any:
    """The process's Spark session on the Ray cluster this process is connected to (started on first use).
    ``executor_resources`` (Ray custom resources, e.g. ``{"node:__internal_head__": 0.001}``) pins the
    executors to the nodes that have them."""
    global _session, _session_ray
    with _lock:
        import ray

        if _session is not None:
            if ray.is_initialized() and _ray_identity() == _session_ray and _answers(_session):
                return _session
            # Its Ray cluster was shut down (another may run now: a second deployment in this process, a
            # restarted Ray), its JVM is gone, or its executors are (their node lost): that session can serve
            # nothing (raydp starts no executor in place of a lost one: a job would wait for ever), a new one
            # starts.
            log.info("the Spark session's Ray cluster, JVM or executors are gone: starting a new session")
            _discard_session()
        problem = java_problem()
        if problem:
            raise JavaMissingError(problem)
        if not ray.is_initialized():
            raise RuntimeError("connect to the Ray cluster first (raygroups.connect / start_local / deploy)")
        # Executors must run this interpreter (the one with raygroups installed), not the system python3.
        os.environ["PYSPARK_PYTHON"] = sys.executable
        os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
        if not verbose:
            for name in ("py4j", "pyspark", "raydp"):
                logging.getLogger(name).setLevel(logging.ERROR)
        import raydp

        # The JVM and raydp's Ray workers inherit this process's stdout/stderr at start-up: unless asked
        # for, their console noise (log4j, Ray's gcs_client lines) goes to a log file instead.
        with _output_to(None if verbose else spark_log_path()):
            spark = raydp.init_spark(
                app_name="raygroups-compaction", num_executors=executors, executor_cores=executor_cores,
                executor_memory=executor_memory, configs=spark_configs(executor_memory, verbose, executor_resources),
            )
            spark.sparkContext.setLogLevel("INFO" if verbose else "ERROR")
        _session, _session_ray = spark, _ray_identity()
        return spark


def cancel_jobs() -> bool:
    """Cancel every job of the process's Spark session (from any thread): the call that waits on one raises.
    False if there is no session, or its JVM does not answer."""
    session = _session
    if session is None:
        return False
    try:
        session.sparkContext.cancelAllJobs()
        return True
    except Exception:  # noqa: BLE001 - a session whose JVM is gone: nothing runs there to cancel
        return False


def _ray_identity() -> tuple[str, str]:
    """The Ray cluster this process is connected to: its GCS address and session name (a new Ray, even at
    the same address, has a new session)."""
    import ray

    context = ray.get_runtime_context()
    return context.gcs_address, context.get_session_name()


def _answers(session: Any) -> bool:
    """The session's JVM answers, and has an executor (one Py4J round trip each): Spark's block managers,
    the driver's included, so more than one."""
    try:
        return session.sparkContext._jsc.sc().getExecutorMemoryStatus().size() > 1
    except Exception:  # noqa: BLE001 - Py4J's errors of a dead gateway vary (connection refused, reset, closed)
        return False


def _discard_session() -> None:
    """Let go of a session whose Ray cluster or JVM is gone: raydp's and pyspark's globals are reset even
    where the teardown cannot reach what it would stop (called with ``_lock`` held)."""
    global _session, _session_ray
    import ray
    import raydp
    from pyspark import SparkContext
    from raydp import context as raydp_context

    # The session's accumulator server (a socket server in this process, which Spark's own stop would end)
    # would otherwise outlive it, and answer a connection at exit with a traceback on the terminal.
    server = getattr(_session.sparkContext, "_accumulatorServer", None) if _session is not None else None
    if server is not None:
        server.shutdown()
        server.server_close()
        _session.sparkContext._accumulatorServer = None
    if ray.is_initialized():
        try:
            raydp.stop_spark()  # clears raydp's context even when its teardown raises
        except Exception as e:  # noqa: BLE001 - the JVM or the Ray actors it would stop are gone
            log.info("stopping the stale Spark session: %s", e)
    else:
        # raydp's teardown calls its actors, and a Ray call without Ray starts a new local one (Ray's
        # auto-init): with its Ray gone nothing of the session is left to stop, only raydp's context (raydp is
        # pinned, these are its own helpers) and pyspark's.
        raydp_context._global_spark_context = None
        raydp_context._reset_pyspark_singletons()
    gateway = SparkContext._gateway
    if gateway is not None:
        try:
            gateway.shutdown()
        except Exception as e:  # noqa: BLE001 - a gateway whose JVM is gone
            log.info("ending the stale Spark JVM: %s", e)
        SparkContext._gateway = None
        SparkContext._jvm = None
    _session, _session_ray = None, None


def spark_log_path() -> str:
    """Where Spark's console output goes when it is not shown."""
    return os.path.join(tempfile.gettempdir(), f"raygroups-spark-{os.getpid()}.log")


@contextlib.contextmanager
def _output_to(path: str | None):
    if path is None:
        yield
        return
    sys.stdout.flush()
    sys.stderr.flush()
    saved = [os.dup(1), os.dup(2)]
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        os.dup2(fd, 1)
        os.dup2(fd, 2)
        yield
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        for f in (fd, *saved):
            os.close(f)


def stop_spark_session() -> None:
    global _session, _session_ray
    with _lock:
        if _session is None:
            return
        import ray
        import raydp

        if not ray.is_initialized() or _ray_identity() != _session_ray:
            _discard_session()  # its Ray is gone: nothing of it answers
            return
        raydp.stop_spark()
        _session = None
        _session_ray = None
        # The JVM stays up after Spark stops, attached to this Ray cluster for good (its Ray runtime cannot
        # be initialised twice): end it too, so that a later session in this process (on another Ray
        # cluster, e.g. after ray.shutdown) starts a fresh one.
        from pyspark import SparkContext

        gateway = SparkContext._gateway
        if gateway is not None:
            try:
                gateway.shutdown()
            finally:
                SparkContext._gateway = None
                SparkContext._jvm = None
