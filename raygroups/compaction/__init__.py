"""Cluster-wide compaction of the offsets logs as a Spark job on Ray (raydp).

``job`` holds the Spark steps (decode in executors with the project's codec, decide what survives with Spark
SQL, write through the reference compactor's batch emitter, prove the replayed states equal);
``spark_session`` starts and shares the one Spark session of a process.
"""
