"""Run a local deployment with a Kafka wire-protocol gateway in front of it, for running Kafka clients' own
test suites against it (docs/client-suites.md). The ``raygroups gateway`` command is the supported way to
run one in front of an existing deployment; this script starts its own.

    RAY_ADDRESS=local .venv/bin/python scripts/gateway_serve.py --port 19092 --topic topic-a:4 \
        --config group.min.session.timeout.ms=1000

Prints ``bootstrap <host:port>`` once clients can connect, and runs until SIGINT or SIGTERM (exit 0).
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading


def topic_arg(text: str) -> tuple[str, int, int | None]:
    name, *numbers = text.split(":")
    if not name or len(numbers) not in (1, 2) or not all(n.isdigit() for n in numbers) \
            or not 1 <= int(numbers[0]) <= 10_000:
        raise argparse.ArgumentTypeError(
            f"--topic must be NAME:PARTITIONS[:RECORDS] with 1..10000 partitions, got {text!r}")
    return name, int(numbers[0]), int(numbers[1]) if len(numbers) == 2 else None


class TopicSources:
    """One ``SyntheticSource`` per topic, so that topics can hold different numbers of records."""

    def __init__(self, sources: dict) -> None:
        self._sources = sources

    def topics(self) -> dict[str, int]:
        return {name: source.topics()[name] for name, source in self._sources.items()}

    def read(self, topic: str, partition: int, offset: int, max_records: int) -> list:
        return self._source(topic).read(topic, partition, offset, max_records)

    def end_offset(self, topic: str, partition: int) -> int:
        return self._source(topic).end_offset(topic, partition)

    def start_offset(self, topic: str, partition: int) -> int:
        return self._source(topic).start_offset(topic, partition)

    def offset_for_time(self, topic: str, partition: int, timestamp_ms: int) -> int | None:
        return self._source(topic).offset_for_time(topic, partition, timestamp_ms)

    def _source(self, topic: str):
        source = self._sources.get(topic)
        if source is None:
            raise ValueError(f"unknown topic {topic!r}; this source has {sorted(self._sources)}")
        return source


def port_arg(text: str) -> int:
    if not text.isdigit() or not 0 <= int(text) <= 65_535:
        raise argparse.ArgumentTypeError(f"--port must be an integer in 0..65535, got {text!r}")
    return int(text)


def config_arg(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"--config must be KEY=VALUE (a Kafka property), got {text!r}")
    return key, int(value) if value.lstrip("-").isdigit() else value


def count_arg(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {text!r}")
    return int(text)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--port", type=port_arg, default=0, help="port to listen on (0: a free one)")
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on")
    parser.add_argument("--topic", type=topic_arg, action="append", required=True,
                        help="a source topic NAME:PARTITIONS[:RECORDS] (repeatable)")
    parser.add_argument("--records", type=count_arg, default=10_000,
                        help="records per partition of a topic that does not give RECORDS")
    parser.add_argument("--num-partitions", type=count_arg, default=4, help="coordinator partitions")
    parser.add_argument("--config", type=config_arg, action="append", default=[],
                        help="a coordinator property KEY=VALUE, e.g. group.min.session.timeout.ms=1000 (repeatable)")
    args = parser.parse_args(argv)
    if len({name for name, _, _ in args.topic}) != len(args.topic):
        parser.error("--topic names a topic twice")

    from raygroups.coordinator.config import CoordinatorConfig

    import raygroups
    import raygroups.gateway
    from raygroups.sources import SyntheticSource

    config = {"group.initial.rebalance.delay.ms": 0, **dict(args.config)}
    try:
        CoordinatorConfig.from_properties(config)
    except (TypeError, ValueError) as e:
        parser.error(f"--config: {e}")
    source = TopicSources({
        name: SyntheticSource({name: partitions}, records_per_partition=args.records if records is None else records)
        for name, partitions, records in args.topic})
    cluster = raygroups.start_local(num_partitions=args.num_partitions, config=config)
    try:
        gw = raygroups.gateway.start(cluster, host=args.host, port=args.port, source=source)
    except OSError as e:
        cluster.shutdown()
        print(f"gateway_serve.py: {e.strerror or e}", file=sys.stderr)
        return 1
    except BaseException:
        cluster.shutdown()
        raise
    # ray.init() installed its own SIGTERM handler; this process must exit 0 on SIGTERM.
    stop = threading.Event()
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, lambda *_: stop.set())
    print(f"bootstrap {gw.bootstrap_servers}", flush=True)
    while not stop.wait(1.0):
        pass
    gw.stop()
    cluster.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
