"""What the processor tells operators: Prometheus metrics and log lines (text or JSON)."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import orjson
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector


@dataclass(frozen=True)
class ProcessorMetrics:
    """The processor's Prometheus metrics, in their own registry."""

    registry: CollectorRegistry
    records_processed: Counter
    dead_lettered: Counter
    redelivered: Counter
    broker_failures: Counter
    broker_connected: Gauge
    store_failures: Counter
    verdicts: Counter
    series: Gauge
    latency: Histogram
    verdict_lag: Histogram

    @classmethod
    def create(cls) -> ProcessorMetrics:
        registry = CollectorRegistry()
        return cls(
            registry=registry,
            records_processed=Counter(
                "perfwatch_records_processed",
                "Valid records processed (state committed)",
                registry=registry,
            ),
            dead_lettered=Counter(
                "perfwatch_records_dead_lettered",
                "Messages sent to the dead-letter topic, by reason",
                ["reason"],
                registry=registry,
            ),
            redelivered=Counter(
                "perfwatch_records_redelivered",
                "Messages received with a redelivery count above zero",
                registry=registry,
            ),
            broker_failures=Counter(
                "perfwatch_broker_failures",
                "Times the broker did not answer and the processor backed off, or the "
                "subscription's connection was lost",
                registry=registry,
            ),
            broker_connected=Gauge(
                "perfwatch_broker_connected",
                "1 while the subscription to the records topic is connected to the broker, "
                "0 while the client reconnects or before the processor started",
                registry=registry,
            ),
            store_failures=Counter(
                "perfwatch_store_failures",
                "Times the state store stopped answering and the processor waited for it",
                registry=registry,
            ),
            verdicts=Counter(
                "perfwatch_verdicts_published",
                "Verdicts published, by kind",
                ["kind"],
                registry=registry,
            ),
            series=Gauge("perfwatch_series", "Series in the state store", registry=registry),
            latency=Histogram(
                "perfwatch_processing_latency_seconds",
                "From receiving a message to acknowledging it",
                registry=registry,
            ),
            verdict_lag=Histogram(
                "perfwatch_verdict_lag_seconds",
                "From the record's publication to the broker's receipt of its verdict",
                buckets=(0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60),
                registry=registry,
            ),
        )

    def _total(self, name: str) -> float:
        return sum(
            sample.value
            for metric in self.registry.collect()
            if metric.name == name
            for sample in metric.samples
            if sample.name == f"{name}_total"
        )

    def records_processed_total(self) -> float:
        return self._total("perfwatch_records_processed")

    def dead_lettered_total(self) -> float:
        return self._total("perfwatch_records_dead_lettered")

    def broker_failures_total(self) -> float:
        return self._total("perfwatch_broker_failures")

    def store_failures_total(self) -> float:
        return self._total("perfwatch_store_failures")

    def settled(self) -> float:
        """Messages finished for good: processed, or dead-lettered."""
        return self.records_processed_total() + self.dead_lettered_total()

    def serve(self, host: str, port: int) -> Callable[[], None]:
        """Expose /metrics on host:port; returns the function that stops it."""
        exposed = CollectorRegistry(auto_describe=False)
        exposed.register(_WithoutCreated(self.registry))
        server, thread = start_http_server(port, addr=host, registry=exposed)

        def stop() -> None:
            server.shutdown()
            server.server_close()
            thread.join(5)

        return stop


class _WithoutCreated(Collector):
    """`registry`'s metrics without their `_created` samples: the Prometheus text format
    writes those as gauges of their own, repeating each counter's and histogram's HELP."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self._registry = registry

    def collect(self) -> Iterator[Metric]:
        for family in self._registry.collect():
            family.samples = [s for s in family.samples if not s.name.endswith("_created")]
            yield family


# Attributes every LogRecord has; anything else was passed in `extra=`.
_LOG_RECORD_ATTRIBUTES = frozenset(
    set(vars(logging.LogRecord("", 0, "", 0, "", None, None))) | {"message", "asctime"}
)


# uvicorn's lines carry a copy of their message with terminal colours.
_NOT_FIELDS = _LOG_RECORD_ATTRIBUTES | {"color_message"}


def _extra_fields(record: logging.LogRecord) -> dict[str, Any]:
    return {k: v for k, v in vars(record).items() if k not in _NOT_FIELDS}


class JsonLogFormatter(logging.Formatter):
    """One JSON object per line: time, level, logger, message and the `extra=` fields."""

    def format(self, record: logging.LogRecord) -> str:
        document = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
            **_extra_fields(record),
        }
        if record.exc_info:
            document["exception"] = self.formatException(record.exc_info)
        return orjson.dumps(document, default=str).decode()


class TextLogFormatter(logging.Formatter):
    """`time level logger: message key=value ...`"""

    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)s %(name)s: %(message)s")

    def format(self, record: logging.LogRecord) -> str:
        fields = " ".join(f"{k}={v}" for k, v in _extra_fields(record).items())
        text = super().format(record)
        return f"{text} {fields}" if fields else text


# perfwatch's own loggers and psycopg's, whose warnings (a connection lost while a
# statement batch was open, ...) otherwise went out as bare lines among the JSON ones.
SERVICE_LOGGERS = ("perfwatch", "psycopg")


def configure_logging(
    log_format: str, level: str, loggers: Sequence[str] = SERVICE_LOGGERS
) -> None:
    """Send the logs of `loggers` (perfwatch's own, and those of a library whose lines
    should read the same) to stderr as text or JSON lines."""
    handler = logging.StreamHandler()
    handler.setFormatter(JsonLogFormatter() if log_format == "json" else TextLogFormatter())
    for name in loggers:
        logger = logging.getLogger(name)
        logger.handlers[:] = [handler]
        logger.setLevel(level.upper())
        logger.propagate = False
