"""The member ids a coordinator hands out: Kafka's ``<client id or group instance id>-<UUID>``
(``ClassicGroup.generateMemberId``). The pure core takes the generator as an argument (it may not draw
randomness), and tests pass a deterministic one."""

from __future__ import annotations

import uuid


def new_member_id(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4()}"
