"""Prometheus metrics under controller-runtime's and client-go's names and labels.

Go-operator dashboards (controller-runtime's Grafana boards, kube-prometheus alerts) work unchanged on these series.
They live in prometheus_client's default registry so the process collectors and any metrics added by the
reconcilers are served from the same `/metrics`.
"""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram, disable_created_metrics

# controller-runtime never exposes `_created` series; keep the output identical.
disable_created_metrics()  # type: ignore[no-untyped-call]

_RECONCILE_BUCKETS = (
    *(0.005, 0.01, 0.025, 0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.35, 0.4, 0.45, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0),
    *(1.25, 1.5, 1.75, 2.0, 2.5, 3.0, 3.5, 4.0, 4.5, 5, 6, 7, 8, 9, 10, 15, 20, 25, 30, 40, 50, 60),
)
# client-go's workqueue buckets: prometheus.ExponentialBuckets(10e-9, 10, 12).
_QUEUE_BUCKETS = tuple(10e-9 * 10**i for i in range(12))
# client-go's rest client latency buckets.
_REST_BUCKETS = (0.005, 0.025, 0.1, 0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 15.0, 30.0, 60.0)

RECONCILE_TOTAL = Counter(
    "controller_runtime_reconcile_total", "Total number of reconciliations per controller", ["controller", "result"]
)
RECONCILE_ERRORS = Counter(
    "controller_runtime_reconcile_errors_total", "Total number of reconciliation errors per controller", ["controller"]
)
TERMINAL_RECONCILE_ERRORS = Counter(
    "controller_runtime_terminal_reconcile_errors_total",
    "Total number of terminal reconciliation errors per controller",
    ["controller"],
)
RECONCILE_TIME = Histogram(
    "controller_runtime_reconcile_time_seconds",
    "Length of time per reconciliation per controller",
    ["controller"],
    buckets=_RECONCILE_BUCKETS,
)
MAX_CONCURRENT_RECONCILES = Gauge(
    "controller_runtime_max_concurrent_reconciles",
    "Maximum number of concurrent reconciles per controller",
    ["controller"],
)
ACTIVE_WORKERS = Gauge(
    "controller_runtime_active_workers", "Number of currently used workers per controller", ["controller"]
)

WORKQUEUE_DEPTH = Gauge("workqueue_depth", "Current depth of workqueue", ["name"])
WORKQUEUE_ADDS = Counter("workqueue_adds_total", "Total number of adds handled by workqueue", ["name"])
WORKQUEUE_QUEUE_DURATION = Histogram(
    "workqueue_queue_duration_seconds",
    "How long in seconds an item stays in workqueue before being requested",
    ["name"],
    buckets=_QUEUE_BUCKETS,
)
WORKQUEUE_WORK_DURATION = Histogram(
    "workqueue_work_duration_seconds",
    "How long in seconds processing an item from workqueue takes",
    ["name"],
    buckets=_QUEUE_BUCKETS,
)
WORKQUEUE_UNFINISHED_WORK = Gauge(
    "workqueue_unfinished_work_seconds",
    "How many seconds of work has been done that is in progress and hasn't been observed by work_duration",
    ["name"],
)
WORKQUEUE_LONGEST_RUNNING = Gauge(
    "workqueue_longest_running_processor_seconds",
    "How many seconds has the longest running processor for workqueue been running",
    ["name"],
)
WORKQUEUE_RETRIES = Counter("workqueue_retries_total", "Total number of retries handled by workqueue", ["name"])

REST_CLIENT_REQUESTS = Counter(
    "rest_client_requests_total",
    "Number of HTTP requests, partitioned by status code, method, and host",
    ["code", "method", "host"],
)
REST_CLIENT_DURATION = Histogram(
    "rest_client_request_duration_seconds",
    "Request latency in seconds. Broken down by verb, and host",
    ["verb", "host"],
    buckets=_REST_BUCKETS,
)

LEADER_ELECTION_STATUS = Gauge(
    "leader_election_master_status",
    "Gauge of if the reporting system is master of the relevant lease, 0 indicates backup, 1 indicates master",
    ["name"],
)

APPLY_CACHE_HITS = Counter(
    "apply_cache_hits_total", "Server-side applies skipped because the live object still matches the intent", ["kind"]
)
APPLY_CACHE_MISSES = Counter(
    "apply_cache_misses_total", "Server-side applies sent because the intent or the live object changed", ["kind"]
)
