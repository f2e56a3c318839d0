"""raygroups: Apache Kafka's consumer-group coordinator, rebuilt as an actor system on Ray.

The pure parts (``Errors``, ``partition_for``, ``CoordinatorConfig``, ``raygroups.testing``) import
without Ray; the Ray parts (``deploy``, ``start_local``, ``connect``, ``Consumer``, ``ConsumerGroup``, ...) load
on first use.
"""

from raygroups.coordinator.config import CoordinatorConfig
from raygroups.coordinator.errors import Errors
from raygroups.coordinator.partitioning import partition_for

__version__ = "0.1.0"

_LAZY = {
    "Cluster": "raygroups.deployment.cluster",
    "start_local": "raygroups.deployment.start",
    "connect": "raygroups.deployment.start",
    "deploy": "raygroups.deployment.start",
    "Consumer": "raygroups.client.consumer",
    "ConsumerRebalanceListener": "raygroups.client.consumer",
    "CommitFailedError": "raygroups.client.consumer",
    "ConsumerError": "raygroups.client.consumer",
    "FatalConsumerError": "raygroups.client.consumer",
    "ConsumerGroup": "raygroups.consumer_group",
    "VerifyingProcessor": "raygroups.consumer_group",
    "Source": "raygroups.sources",
    "SourceRecord": "raygroups.sources",
    "SyntheticSource": "raygroups.sources",
}

__all__ = ["CoordinatorConfig", "Errors", "partition_for", *_LAZY]


def __getattr__(name: str):
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'raygroups' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value
