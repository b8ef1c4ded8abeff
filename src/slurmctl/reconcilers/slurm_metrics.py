"""The `slurm_*` Prometheus series: Slurm's state per cluster, from the same reads that set the pods' SlurmNodeState,
so a dashboard needs no separate exporter.

| series | labels | meaning |
|---|---|---|
| slurm_up | namespace, cluster | 1 when the last read of slurmrestd succeeded |
| slurm_nodes | namespace, cluster, state | nodes by Slurm state (idle, allocated, mixed, drained, down, ...) |
| slurm_jobs | namespace, cluster, state | jobs slurmctld knows, by state (running, pending, completed, ...) |
| slurm_partition_nodes | namespace, cluster, partition | nodes in each partition |
| slurm_partition_cpus | namespace, cluster, partition | CPUs in each partition |
| slurmctl_slurmrestd_requests_total | namespace, cluster, method, endpoint | requests the operator sent slurmrestd |

Values are the last snapshot per cluster (reconcilers/slurm_snapshot.py), served at scrape time; a deleted cluster's
series disappear with it. The request counter is how the cost of watching Slurm is measured (the figures in
docs/performance.md, "How the operator watches Slurm"): `endpoint` is the path's first part after the API version
(`nodes`, `jobs`, `node`, `qos`, ...).
"""

from __future__ import annotations

import weakref
from collections import Counter
from collections.abc import Iterator

from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from slurmctl.reconcilers.slurm_snapshot import SlurmSnapshot

_LABELS = ["namespace", "cluster"]


def state_label(name: str) -> str:
    return name.lower().replace("+", "_")


def endpoint(path: str) -> str:
    """`/slurm/v0.0.42/node/w-0` -> `node`: a bounded label (no node names)."""
    parts = [p for p in path.split("?", maxsplit=1)[0].split("/") if p]
    return parts[2] if len(parts) > 2 else "/".join(parts)


class SlurmCollector(Collector):
    def __init__(self) -> None:
        self._snapshots: dict[tuple[str, str], SlurmSnapshot] = {}
        self._requests: Counter[tuple[str, str, str, str]] = Counter()

    def set(self, namespace: str, cluster: str, snapshot: SlurmSnapshot) -> None:
        self._snapshots[(namespace, cluster)] = snapshot

    def count(self, namespace: str, cluster: str, method: str, path: str) -> None:
        self._requests[(namespace, cluster, method, endpoint(path))] += 1

    def forget(self, namespace: str, cluster: str) -> None:
        self._snapshots.pop((namespace, cluster), None)
        for key in [k for k in self._requests if k[:2] == (namespace, cluster)]:
            del self._requests[key]

    def collect(self) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
        up = GaugeMetricFamily("slurm_up", "Whether the operator's last read of slurmrestd succeeded", labels=_LABELS)
        nodes = GaugeMetricFamily("slurm_nodes", "Slurm nodes by state", labels=[*_LABELS, "state"])
        jobs = GaugeMetricFamily("slurm_jobs", "Slurm jobs by state", labels=[*_LABELS, "state"])
        p_nodes = GaugeMetricFamily("slurm_partition_nodes", "Nodes per partition", labels=[*_LABELS, "partition"])
        p_cpus = GaugeMetricFamily("slurm_partition_cpus", "CPUs per partition", labels=[*_LABELS, "partition"])
        for (namespace, cluster), snap in sorted(self._snapshots.items()):
            key = [namespace, cluster]
            up.add_metric(key, 1.0 if snap.up else 0.0)
            if not snap.up:
                continue
            for state, count in sorted(Counter(state_label(n.display) for n in snap.nodes).items()):
                nodes.add_metric([*key, state], count)
            for state, count in sorted(Counter(j.state.lower() for j in snap.jobs).items()):
                jobs.add_metric([*key, state], count)
            for part in snap.partitions:
                p_nodes.add_metric([*key, part.name], part.total_nodes)
                p_cpus.add_metric([*key, part.name], part.total_cpus)
        requests = CounterMetricFamily(
            "slurmctl_slurmrestd_requests",
            "Requests the operator sent slurmrestd",
            labels=[*_LABELS, "method", "endpoint"],
        )
        for (namespace, cluster, method, path), count in sorted(self._requests.items()):
            requests.add_metric([namespace, cluster, method, path], count)
        yield from (up, nodes, jobs, p_nodes, p_cpus, requests)


_COLLECTORS: weakref.WeakKeyDictionary[CollectorRegistry, SlurmCollector] = weakref.WeakKeyDictionary()


def collector_for(registry: CollectorRegistry) -> SlurmCollector:
    """One collector per registry: several managers in one process (tests) share prometheus_client's default."""
    found = _COLLECTORS.get(registry)
    if found is None:
        found = _COLLECTORS[registry] = SlurmCollector()
        registry.register(found)
    return found
