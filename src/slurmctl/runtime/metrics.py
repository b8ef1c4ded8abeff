"""Prometheus metrics under controller-runtime's and client-go's names and labels.

Go-operator dashboards (controller-runtime's Grafana boards, kube-prometheus alerts) work unchanged on these series.
`Metrics` registers them in the registry it is given; nothing happens at import. The manager's default is
prometheus_client's process-wide registry, so the process collectors and any metrics the reconcilers add are served
from the same `/metrics`. controller-runtime never exposes `_created` series: `exposition` leaves them out (without
switching them off for the whole process, as `disable_created_metrics` would).
"""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client import REGISTRY, CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.metrics_core import Metric

_RECONCILE_BUCKETS = (
    *(0.005, 0.01, 0.025, 0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.35, 0.4, 0.45, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0),
    *(1.25, 1.5, 1.75, 2.0, 2.5, 3.0, 3.5, 4.0, 4.5, 5, 6, 7, 8, 9, 10, 15, 20, 25, 30, 40, 50, 60),
)
# client-go's workqueue buckets: prometheus.ExponentialBuckets(10e-9, 10, 12).
_QUEUE_BUCKETS = tuple(10e-9 * 10**i for i in range(12))
# client-go's rest client latency buckets.
_REST_BUCKETS = (0.005, 0.025, 0.1, 0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 15.0, 30.0, 60.0)


class Metrics:
    """Every series the runtime records, registered in one registry."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.registry = registry
        self.reconcile_total = Counter(
            "controller_runtime_reconcile_total",
            "Total number of reconciliations per controller",
            ["controller", "result"],
            registry=registry,
        )
        self.reconcile_errors = Counter(
            "controller_runtime_reconcile_errors_total",
            "Total number of reconciliation errors per controller",
            ["controller"],
            registry=registry,
        )
        self.terminal_reconcile_errors = Counter(
            "controller_runtime_terminal_reconcile_errors_total",
            "Total number of terminal reconciliation errors per controller",
            ["controller"],
            registry=registry,
        )
        self.reconcile_time = Histogram(
            "controller_runtime_reconcile_time_seconds",
            "Length of time per reconciliation per controller",
            ["controller"],
            buckets=_RECONCILE_BUCKETS,
            registry=registry,
        )
        self.max_concurrent_reconciles = Gauge(
            "controller_runtime_max_concurrent_reconciles",
            "Maximum number of concurrent reconciles per controller",
            ["controller"],
            registry=registry,
        )
        self.active_workers = Gauge(
            "controller_runtime_active_workers",
            "Number of currently used workers per controller",
            ["controller"],
            registry=registry,
        )
        self.workqueue_depth = Gauge("workqueue_depth", "Current depth of workqueue", ["name"], registry=registry)
        self.workqueue_adds = Counter(
            "workqueue_adds_total", "Total number of adds handled by workqueue", ["name"], registry=registry
        )
        self.workqueue_queue_duration = Histogram(
            "workqueue_queue_duration_seconds",
            "How long in seconds an item stays in workqueue before being requested",
            ["name"],
            buckets=_QUEUE_BUCKETS,
            registry=registry,
        )
        self.workqueue_work_duration = Histogram(
            "workqueue_work_duration_seconds",
            "How long in seconds processing an item from workqueue takes",
            ["name"],
            buckets=_QUEUE_BUCKETS,
            registry=registry,
        )
        self.workqueue_unfinished_work = Gauge(
            "workqueue_unfinished_work_seconds",
            "How many seconds of work has been done that is in progress and hasn't been observed by work_duration",
            ["name"],
            registry=registry,
        )
        self.workqueue_longest_running = Gauge(
            "workqueue_longest_running_processor_seconds",
            "How many seconds has the longest running processor for workqueue been running",
            ["name"],
            registry=registry,
        )
        self.workqueue_retries = Counter(
            "workqueue_retries_total", "Total number of retries handled by workqueue", ["name"], registry=registry
        )
        self.rest_client_requests = Counter(
            "rest_client_requests_total",
            "Number of HTTP requests, partitioned by status code, method, and host",
            ["code", "method", "host"],
            registry=registry,
        )
        self.rest_client_duration = Histogram(
            "rest_client_request_duration_seconds",
            "Request latency in seconds. Broken down by verb, and host",
            ["verb", "host"],
            buckets=_REST_BUCKETS,
            registry=registry,
        )
        self.leader_election_status = Gauge(
            "leader_election_master_status",
            "Gauge of if the reporting system is master of the relevant lease, 0 indicates backup, 1 indicates master",
            ["name"],
            registry=registry,
        )
        self.apply_cache_hits = Counter(
            "apply_cache_hits_total",
            "Server-side applies skipped because the live object still matches the intent",
            ["kind"],
            registry=registry,
        )
        self.apply_cache_misses = Counter(
            "apply_cache_misses_total",
            "Server-side applies sent because the intent or the live object changed",
            ["kind"],
            registry=registry,
        )


_default: list[Metrics] = []


def default_metrics() -> Metrics:
    """The metrics in prometheus_client's process-wide registry, registered on first use (once per process)."""
    if not _default:
        _default.append(Metrics(REGISTRY))
    return _default[0]


class _WithoutCreated:
    """A registry view without the `_created` samples prometheus_client adds to counters and histograms."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self._registry = registry

    def collect(self) -> Iterator[Metric]:
        for metric in self._registry.collect():
            metric.samples = [s for s in metric.samples if not s.name.endswith("_created")]
            yield metric


def exposition(registry: CollectorRegistry) -> bytes:
    """The text format of everything in `registry`, as controller-runtime serves it."""
    return generate_latest(_WithoutCreated(registry))
