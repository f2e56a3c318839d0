"""The pure coordinator: Kafka's classic group protocol as a state machine, with no I/O, clock, threads or
Ray (an import-linter contract keeps it so).

``runtime.CoordinatorRuntime`` routes a request to the shard that owns its group and runs it;
``shard.GroupCoordinatorShard`` holds the groups and offsets of one ``__consumer_offsets`` partition;
its handlers return what they write as a ``result.Result`` (records + response);
``requests.REQUESTS`` is the one registry of request types (validation, handler, error responses, routing,
client lane), which ``api.dispatch`` and every other dispatcher read;
``replay_rules`` is the one definition of what a log record does to durable state (``state.DurableState``)
and of what a later record makes obsolete -- the loader and the compactor in ``offsets_log`` follow it.
"""
