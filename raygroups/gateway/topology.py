"""Where a listener stands among the deployment's listeners: the brokers a client is told about, which of
them leads each topic partition, and which one coordinates each group (Kafka's FindCoordinator)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from raygroups.coordinator.errors import Errors


@dataclass(frozen=True, slots=True)
class BrokerAddress:
    node_id: int
    host: str
    port: int


class Topology(Protocol):
    """Where a listener stands among the deployment's listeners."""

    def brokers(self) -> list[BrokerAddress]: ...

    def controller_id(self) -> int: ...

    def leader_of(self, topic: str, partition: int) -> int: ...

    def serves_group(self, group_id: str) -> bool: ...

    async def find_coordinator(self, group_id: str) -> dict: ...


class SingleListener:
    """One listener in front of the whole deployment: it is every topic partition's leader and every
    group's coordinator (the group API it forwards to finds the shards)."""

    def __init__(self, address: BrokerAddress) -> None:
        self.address = address

    def brokers(self) -> list[BrokerAddress]:
        return [self.address]

    def controller_id(self) -> int:
        return self.address.node_id

    def leader_of(self, topic: str, partition: int) -> int:
        return self.address.node_id

    def serves_group(self, group_id: str) -> bool:
        return True

    async def find_coordinator(self, group_id: str) -> dict:
        a = self.address
        return {"error_code": Errors.NONE, "node_id": a.node_id, "host": a.host, "port": a.port}
