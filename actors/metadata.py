"""Deployment metadata in Ray's GCS key-value store, scoped by the deployment's namespace: the
deployment description and topic metadata survive actor restarts and are found by ``connect``."""

from __future__ import annotations

import json
from typing import Any

from ray.experimental import internal_kv

DEPLOYMENT_KEY = b"raygroups/deployment"
TOPICS_KEY = b"raygroups/topics"
TOPICS_VERSION_KEY = b"raygroups/topics-version"


def kv_get_json(key: bytes, namespace: str) -> Any:
    raw = internal_kv._internal_kv_get(key, namespace=namespace)
    return None if raw is None else json.loads(raw)


def kv_put_json(key: bytes, value: Any, namespace: str) -> None:
    internal_kv._internal_kv_put(key, json.dumps(value).encode(), overwrite=True, namespace=namespace)


def kv_delete(key: bytes, namespace: str) -> None:
    internal_kv._internal_kv_del(key, namespace=namespace)


def read_topics(namespace: str) -> dict[str, int]:
    return dict(kv_get_json(TOPICS_KEY, namespace) or {})


def read_topics_versioned(namespace: str) -> tuple[dict[str, int], int]:
    return read_topics(namespace), int(kv_get_json(TOPICS_VERSION_KEY, namespace) or 0)


def write_topics(topics: dict[str, int], version: int, namespace: str) -> None:
    kv_put_json(TOPICS_KEY, topics, namespace)
    kv_put_json(TOPICS_VERSION_KEY, version, namespace)
