"""raygroups: Apache Kafka's consumer-group coordinator, rebuilt as an actor system on Ray."""

from coordinator.config import CoordinatorConfig
from coordinator.errors import Errors
from coordinator.partitioning import partition_for

__all__ = ["CoordinatorConfig", "Errors", "partition_for"]
__version__ = "0.1.0"
