"""Typed readers of live objects from the cache: what the cluster *is* (a Job's outcome, ready replicas, the uid of a
Secret), read into small frozen values the reconcilers branch on.

Renderers build objects from the spec; what the cluster is comes from the live objects' JSON through the typed views
of reconcilers/views.py (and runtime/objects.py for metadata). Two readers here hand back JSON as it is, and are the
only ones that read it key by key: `condition_of` (its callers keep a condition's lastTransitionTime verbatim, or
compare it with the one they would write) and `trimmed_node` (what the Node cache keeps, as the API wrote it).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from functools import cached_property
from typing import Any, Literal

from slurmctl.api.v1 import CONTROL_PLANE_LABELS, SlurmCluster
from slurmctl.reconcilers.views import Condition, Node, Pod, Secret, Workload, condition
from slurmctl.render.benchmark import CONTAINER as BENCHMARK_CONTAINER
from slurmctl.render.kinds import POD
from slurmctl.render.meta import LABEL_COMPONENT, LABEL_EVICTABLE, LABEL_INSTANCE, LABEL_WORKER_GROUP
from slurmctl.render.populate_jail import GENERATION_ANNOTATION, REFUSED_EXIT_CODE
from slurmctl.render.workers import DAEMON_CONTAINER
from slurmctl.runtime import Request
from slurmctl.runtime.cache import Cache
from slurmctl.runtime.objects import ObjectMeta, derived, meta_of

Live = Mapping[str, Any]


def labels_of(obj: Live | None) -> dict[str, str]:
    """A live object's labels (a copy); empty when it has none (or does not exist)."""
    return dict(meta_of(obj).labels)


def generation_of(obj: Live | None) -> int:
    """A live object's metadata.generation; 0 when unknown."""
    return meta_of(obj).generation or 0


def data_keys(obj: Live | None) -> list[str]:
    """The keys of a Secret's (or ConfigMap's) data; none when it has none (or does not exist)."""
    return list(Secret.of(obj).data)


def ready_replicas(obj: Live | None) -> int:
    """Ready pods of a StatefulSet; 0 when it does not exist."""
    return Workload.of(obj).status.ready_replicas


def available_replicas(obj: Live | None) -> int:
    """Available pods of a Deployment; 0 when it does not exist."""
    return Workload.of(obj).status.available_replicas


def spec_replicas(obj: Live | None) -> int | None:
    """The replicas a live workload asks for; None when it does not exist."""
    return None if obj is None else Workload.of(obj).spec.replicas or 0


def match_labels(obj: Live | None) -> dict[str, str]:
    """A live workload's selector (immutable once created)."""
    return Workload.of(obj).spec.selector.match_labels


def worker_replicas(statefulsets: Iterable[Live]) -> dict[str, int]:
    """Replicas of each live worker StatefulSet by its name (groups no longer in the spec, and StatefulSets whose name
    is not their group's, included); those being deleted are left out."""
    out: dict[str, int] = {}
    for sts in map(Workload.of, statefulsets):
        if sts.metadata.name and not sts.metadata.deletion_timestamp:
            out[sts.metadata.name] = sts.spec.replicas or 0
    return out


REVISION_LABEL = "controller-revision-hash"  # set by the StatefulSet controller on each pod
# The condition the Slurm node loop keeps on each worker pod: its Slurm node's state (reconcilers/slurm_marks.py).
SLURM_NODE_STATE = "SlurmNodeState"


def outdated_pods(statefulset: Live | None, pods: Iterable[WorkerPod]) -> list[str] | None:
    """Names of a StatefulSet's pods that run an older template than its current one, highest ordinal last; None
    while the StatefulSet controller has not yet observed the latest template (its revision is not known)."""
    if statefulset is None:
        return None
    sts = Workload.of(statefulset)
    update = sts.status.update_revision
    if not update or sts.status.observed_generation != sts.metadata.generation:
        return None
    old = [p for p in pods if not p.terminating and p.revision != update]
    return [p.name for p in sorted(old, key=lambda p: p.ordinal)]


def pod_ready(pod: Live) -> bool:
    return Pod.of(pod).ready


def unschedulable(node: Live | None) -> bool:
    """A cordoned Kubernetes node (`kubectl cordon`, the first step of `kubectl drain`): no new pod lands there."""
    return Node.of(node).spec.unschedulable


def node_ready(node: Live | None) -> bool | None:
    """A Kubernetes node's Ready condition: True, False (NotReady: the kubelet says so, or the node lifecycle
    controller set it Unknown because the kubelet stopped reporting), None when the node has none (or is unknown)."""
    cond = _ready_condition(node)
    return None if cond is None else cond.true


def ready_since(node: Live | None) -> str:
    """When the Ready condition last changed (its lastTransitionTime, as the API wrote it); "" when unknown. Tells one
    NotReady spell from the next."""
    cond = _ready_condition(node)
    return "" if cond is None else cond.last_transition_time


def _ready_condition(node: Live | None) -> Condition | None:
    return condition(Node.of(node).status.conditions, "Ready")


def condition_of(obj: Live | None, type_: str) -> Mapping[str, Any] | None:
    """A live object's status condition of a type (a Node's Ready, a Deployment's ReplicaFailure), as its JSON: the
    callers keep its lastTransitionTime verbatim (base.make_condition) or compare it with the one they would write
    (slurm_marks); None without one."""
    status = (obj or {}).get("status") or {}
    return next((c for c in status.get("conditions") or [] if c.get("type") == type_), None)


def trimmed_node(node: Live) -> dict[str, Any]:
    """What the operator keeps of a Node in its cache: its identity and labels, whether it is cordoned, its taints' keys
    and effects (reconcilers/preemption.py), and its Ready
    condition's status and lastTransitionTime (a Node's status, with its image list, is most of its size; the other
    conditions and the heartbeat times change often and nothing here reads them). The Node's JSON enters the cache
    here, and what is kept of it is copied as the API wrote it (a key it did not write stays out)."""
    md = node.get("metadata") or {}
    kept: dict[str, Any] = {k: md[k] for k in ("name", "uid", "resourceVersion") if k in md}
    if md.get("labels"):
        kept["labels"] = dict(md["labels"])
    out: dict[str, Any] = {"metadata": kept, "spec": {"unschedulable": unschedulable(node)}}
    if taints := (node.get("spec") or {}).get("taints"):
        out["spec"]["taints"] = [{k: t[k] for k in ("key", "effect") if k in t} for t in taints]
    if (ready := condition_of(node, "Ready")) is not None:
        cond = {k: ready[k] for k in ("type", "status", "lastTransitionTime") if k in ready}
        out["status"] = {"conditions": [cond]}
    return out


def node_labels(node: Live | None) -> dict[str, str]:
    return labels_of(node)


def control_plane(node: Live | None) -> bool:
    """A control-plane node (its role label, either spelling): never cordoned by the operator."""
    return any(label in CONTROL_PLANE_LABELS for label in labels_of(node))


def topology_placement(pods: Iterable[Live], node: Callable[[str], Live | None]) -> dict[str, dict[str, str]]:
    """Slurm node (pod name) -> the labels of the Kubernetes node it runs on, for the worker pods that have a node
    and are not going. `node` reads a Kubernetes node by name. Readiness is left out on purpose: a probe that fails
    for a few seconds (a slurmctld reconfigure or failover, a node deleted and registered anew) would rewrite the
    file and reconfigure every daemon twice, and a node that registers after the build is placed by the
    controller's follower anyway (see render/topology.py)."""
    out: dict[str, dict[str, str]] = {}
    for pod in pods:
        worker = WorkerPod.of(pod)
        if worker.node_name and not worker.terminating:
            out[worker.name] = node_labels(node(worker.node_name))
    return out


def is_elastic(md: ObjectMeta) -> bool:
    """An elastic group's pod, by its metadata: owned by its SlurmCluster directly (a fixed group's pods are their
    StatefulSet's, and a pod a deleted StatefulSet left behind has no owner)."""
    return any(o.controller and o.kind == "SlurmCluster" for o in md.owner_references)


def ordinal(pod: str) -> int:
    """A StatefulSet pod's ordinal (the number after its last dash); -1 for a name that has none."""
    tail = pod.rpartition("-")[2]
    return int(tail) if tail.isdigit() else -1


@dataclass(frozen=True)
class WorkerPod:
    """A worker pod as the reconcilers read it (its Slurm node has the pod's name): the Slurm node loop, the workers
    component, its drain gate and roll (reconcilers/worker_pods.py) and the group switches. Made once of a cached pod
    (runtime/objects.derived): a pass over 10,240 worker pods read each pod's metadata nine times over (grouping,
    readiness, revisions, elastic ownership, selectors), most of the CPU of the workers pass a size edit waits on."""

    name: str
    node_name: str  # the Kubernetes node it runs on; "" while unscheduled
    has_address: bool  # its sandbox is up (a podIP): slurmd may run
    ready: bool
    slurmd_running: bool  # the slurmd container is running (only then can it register with slurmctld)
    terminating: bool  # it has a deletionTimestamp
    evictable: bool  # carries the evictable label (see render/disruption.py)
    uid: str = ""  # this pod's; a pod re-created under the same name has another
    created: datetime | None = None  # its creationTimestamp; None when unknown
    group: str = ""  # its worker-group label; "" without
    labels: Mapping[str, str] = field(default_factory=dict)
    elastic: bool = False  # `is_elastic`
    revision: str | None = None  # the template revision the StatefulSet controller labelled it with; None: none
    slurm_state: Condition | None = None  # its SLURM_NODE_STATE condition; None: none yet

    @classmethod
    def of(cls, live: Live) -> WorkerPod:
        return derived(live, cls, cls._made)

    @classmethod
    def _made(cls, live: Live) -> WorkerPod:
        pod = Pod.of(live)
        md = pod.metadata
        slurmd = pod.container(DAEMON_CONTAINER)
        return cls(
            name=md.name,
            node_name=pod.spec.node_name,
            has_address=bool(pod.status.pod_ip),
            ready=pod.ready,
            slurmd_running=slurmd is not None and slurmd.state.running is not None,
            terminating=pod.terminating,
            evictable=md.labels.get(LABEL_EVICTABLE) == "true",
            uid=md.uid,
            created=timestamp(md.creation_timestamp),
            group=md.labels.get(LABEL_WORKER_GROUP, ""),
            labels=md.labels,
            elastic=is_elastic(md),
            revision=md.labels.get(REVISION_LABEL),
            slurm_state=condition(pod.status.conditions, SLURM_NODE_STATE),
        )

    @cached_property
    def ordinal(self) -> int:
        """`ordinal(name)`, worked out once (a roll sorts thousands by it)."""
        return ordinal(self.name)

    def selected_by(self, match_labels: Mapping[str, str]) -> bool:
        """Whether a workload's selector (its matchLabels) selects this pod; an empty one (no live StatefulSet of the
        name) selects nothing."""
        return bool(match_labels) and match_labels.items() <= self.labels.items()


def timestamp(value: Any) -> datetime | None:
    """An API timestamp (RFC 3339, e.g. 2026-01-01T00:00:00Z) as an aware datetime; None when absent or unreadable."""
    try:
        return datetime.fromisoformat(str(value).replace("Z", "+00:00")) if value else None
    except ValueError:
        return None


def cluster_of_pod(pod: Live) -> list[Request]:
    """The SlurmCluster a pod belongs to, by its instance label (pods are owned by workloads, not the cluster)."""
    md = meta_of(pod)
    instance = md.labels.get(LABEL_INSTANCE)
    return [Request(md.namespace, instance)] if instance else []


def clusters_on(cache: Cache, node: Live, components: Iterable[str]) -> list[Request]:
    """The SlurmClusters with a pod of one of `components` on this Kubernetes node: those its cordon or labels
    concern. From the pod cache's node index: a Node event reads the few pods there, not every pod (at thousands of
    workers a scan per event was the operator's whole CPU)."""
    name = meta_of(node).name
    pods = (p for c in components for p in cache.list(*POD, labels={LABEL_COMPONENT: c}, node_name=name))
    return sorted({req for pod in pods for req in cluster_of_pod(pod)})


def deleting(obj: Live | None) -> bool:
    return bool(meta_of(obj).deletion_timestamp)


def uid(obj: Live | None) -> str:
    """The object's uid; "" for none (a delete of it then names no incarnation)."""
    return meta_of(obj).uid


def resource_version(obj: Live) -> str:
    return meta_of(obj).resource_version


# Kept short in conditions and Events; the copier's own explanation fits well within it.
MAX_REFUSAL_MESSAGE = 1024


def refusal(pods: Iterable[Live]) -> str | None:
    """What the newest of a populate-jail Job's pods said when it refused the jail volume (its container ended with
    `REFUSED_EXIT_CODE`: the volume holds someone else's files), "" when it said nothing; None when none refused."""
    said: list[tuple[str, str]] = []
    for pod in map(Pod.of, pods):
        for container in pod.status.container_statuses:
            terminated = container.state.terminated
            if terminated is not None and terminated.exit_code == REFUSED_EXIT_CODE:
                said.append((pod.metadata.creation_timestamp, terminated.message.strip()))
    if not said:
        return None
    message = max(said)[1]
    return message if len(message) <= MAX_REFUSAL_MESSAGE else message[: MAX_REFUSAL_MESSAGE - 3] + "..."


JobOutcome = Literal["missing", "running", "failed", "succeeded"]


def job_outcome(job: Live | None) -> JobOutcome:
    """Where a Job the operator made stands: its Complete/SuccessCriteriaMet or Failed/FailureTarget condition (the
    *Target ones come first on Kubernetes >= 1.31, before the pods are gone), else its succeeded count."""
    if job is None:
        return "missing"
    status = job.get("status") or {}
    for cond in status.get("conditions") or []:
        if cond.get("status") == "True" and cond.get("type") in ("Complete", "SuccessCriteriaMet"):
            return "succeeded"
        if cond.get("status") == "True" and cond.get("type") in ("Failed", "FailureTarget"):
            return "failed"
    return "succeeded" if status.get("succeeded") else "running"


@dataclass(frozen=True)
class JobState:
    """What the populate-jail reconciler needs to know about its live Job (and the pods it ran)."""

    uid: str
    succeeded: bool
    failed: bool
    failure: str  # "<reason>: <message>" of the Failed condition, when failed
    generation: int | None  # the SlurmCluster generation the Job was created for; None when unknown
    refusal: str | None = None  # what a pod said when it refused the volume (see `refusal`); None when none did

    @classmethod
    def of(cls, live: Live, pods: Iterable[Live] = ()) -> JobState:
        """`pods`: the Job's own pods (owned by its uid), where a refusal shows: a Job's status counts failed pods,
        it does not say why they failed."""
        job = Workload.of(live)
        failed = next((c for c in job.status.conditions if c.type == "Failed" and c.true), None)
        raw = job.metadata.annotations.get(GENERATION_ANNOTATION)
        try:
            generation = int(raw) if raw is not None else None
        except ValueError:
            generation = None
        return cls(
            uid=job.metadata.uid,
            succeeded=job.status.succeeded >= 1,
            failed=failed is not None,
            failure="" if failed is None else f"{failed.reason or 'Failed'}: {failed.message or 'the Job failed'}",
            generation=generation,
            refusal=refusal(pods),
        )

    def needs_recreate(self, cluster: SlurmCluster) -> bool:
        """Whether the live Job must be deleted and applied anew for the cluster's current generation.

        - `overwrite: true` re-runs the copy once per generation: a Job created for an older generation is replaced,
          the one created for this generation is left alone whatever its outcome (succeeded, running or failed).
        - A failed Job is retried once the spec changes (a new generation, e.g. a fixed image), never in a loop.
        - So is a refused one, at once: its remaining retries would only be refused again, and the fix (adopt, another
          volume) is a spec change. One that succeeded after all (the volume was emptied meanwhile) is done.
        """
        if self.generation == cluster.metadata.generation:
            return False
        refused = self.refusal is not None and not self.succeeded
        return cluster.spec.populate_jail.overwrite or self.failed or refused


@dataclass(frozen=True)
class BenchmarkRun:
    """The NCCL benchmark's last finished run, as its Job's pod left it: the benchmark's report (one line of JSON in
    the container's termination message, see images/scripts/nccl_benchmark.py), or what the pod said instead."""

    job: str  # the Job that ran it
    finished: str  # when its container ended (finishedAt, as the API wrote it); "" when unknown
    exit_code: int
    report: Mapping[str, Any] | None  # None: the run wrote none (it died first, or an older image)
    said: str = ""  # the termination message when it is no report (the kubelet's fallback: the log's tail)


def last_benchmark_run(pods: Iterable[Live]) -> BenchmarkRun | None:
    """The run whose benchmark container ended last among the benchmark Jobs' pods; None while none has ended."""
    runs: list[tuple[str, str, BenchmarkRun]] = []
    for pod in map(Pod.of, pods):
        md = pod.metadata
        container = pod.container(BENCHMARK_CONTAINER)
        terminated = None if container is None else container.state.terminated
        if terminated is None:
            continue
        owner = next((o.name for o in md.owner_references if o.kind == "Job"), "")
        message = terminated.message.strip()
        report = _report(message)
        run = BenchmarkRun(
            job=owner or md.labels.get("job-name") or md.name,
            finished=terminated.finished_at,
            exit_code=terminated.exit_code,
            report=report,
            said="" if report is not None else _shortened(message),
        )
        runs.append((run.finished, md.creation_timestamp, run))
    return max(runs, key=lambda r: (r[0], r[1]))[2] if runs else None


def _report(message: str) -> Mapping[str, Any] | None:
    try:
        report = json.loads(message) if message.startswith("{") else None
    except ValueError:
        return None
    return report if isinstance(report, dict) and isinstance(report.get("exit"), int) else None


def _shortened(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= MAX_REFUSAL_MESSAGE else "..." + text[-(MAX_REFUSAL_MESSAGE - 3) :]


def owner_uids(obj: Live) -> tuple[str, ...]:
    """The uids of a live object's owners (its ownerReferences), as the informer cache indexes them."""
    return tuple(ref.uid for ref in meta_of(obj).owner_references if ref.uid)
