"""The coordinator on Ray: the shard actor (``shard_actor.CoordinatorShard``), the per-node ``LogServer``
holding follower replicas -- plain classes: every Ray option, name and lookup is in
``raygroups.deployment.seam``.

The shard actor is the Ray face over one ``served_partition.ServedPartition`` and the parts that serve it:
``spare`` (a warm spare and its hot standby, ``standby``), ``shard_load``, ``group_commit``,
``partition_writer`` (and its maintenance), ``audit``, ``log_compaction``, ``shard_status`` and ``metrics``.

A shard makes each batch durable through one ``partition_writer.PartitionWriter`` -- local (append +
fsync) or replicated (acks=all to the ISR, ``replication.LeaderReplication``) -- and one table maps every
append failure to Kafka's error.
"""
