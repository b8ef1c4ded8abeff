"""One large SlurmCluster on simulated nodes (issue 41): the scale harness of test/e2e/scale.py at full size.

A control plane of its own (hack/control-plane.sh, kube-controller-manager included), the real kube-scheduler, KWOK
(hack/kwok.sh) with BENCH_SCALE_NODES simulated nodes (racks and blocks as labels, one in ten tainted), the operator in
a process of its own, and the stand-in slurmrestd on the in-memory Slurm (test/fake_slurm). What it measures, each
beside its floor where there is one:

- create -> every worker pod Running, against the plain loop: the very objects the operator made (read back from its
  namespace, its fields stripped) applied by a server-side-apply loop into a fresh namespace, same run;
- the operator's CPU seconds and peak memory over the whole run (from /proc: its own process), its API writes per
  object it owns (the API server's audit log);
- writes over an idle window (goal: 0), and the node loop's CPU per pass with BENCH_SCALE_JOBS jobs in Slurm;
- a `size` edit of one group, +N and -N (the drain gate included): edit -> the StatefulSet's replicas say it; then
  edits of +1 one at a time on a quiet operator (none needs a pod to go): the p50 of edit -> StatefulSet;
- a restart-requiring change of every worker, rolled with spec.maintenance.maxUnavailable BENCH_SCALE_ROLL_LIMIT:
  nodes out of service at once, never more than that limit; total time; no job lost;
- a drain storm: every simulated node cordoned, in waves of a tenth: cordon -> Slurm drained every worker there.

Sizes (environment): BENCH_SCALE_NODES (1000), BENCH_SCALE_WORKERS (10240), BENCH_SCALE_GROUPS (64),
BENCH_SCALE_JOBS (20000), BENCH_SCALE_EDIT (500), BENCH_SCALE_EDIT_SAMPLES (9), BENCH_SCALE_ROLL_LIMIT (5%),
BENCH_SCALE_KCM_QPS (100); BENCH_SCALE_ROLL=0 leaves the roll out (at 10,240 workers it alone takes over an hour on 2
cores). The StatefulSet controller creates pods at kube-controller-manager's client rate, for the plain loop as for the
operator: its default of 20 a second alone takes 8.5 minutes for 10,240 pods, so the bench raises it (as large clusters
do).
Each figure is printed as soon as it is measured (a run stopped early still says what it got), then all again.
"""

from __future__ import annotations

import asyncio
import os
import statistics
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import msgspec
from kubernetes_asyncio import client, config
from test.e2e.clusters import spec as base_spec
from test.e2e.harness import ControlPlane, control_plane_script
from test.e2e.operator import E2E_SERVICE_ACCOUNT, NAMESPACE, e2e_operator_kubeconfig
from test.e2e.scale import (
    OperatorProcess,
    Simulation,
    audit_size,
    groups,
    operator_writes,
    out_of_service,
)
from test.fake_slurm.model import FakeSlurm
from test.fake_slurm.restd import UNCOMPRESSED, StandInRestd

from bench import goal, versus
from slurmctl.api.v1 import MaintenanceSpec
from slurmctl.render import meta

NODES = int(os.environ.get("BENCH_SCALE_NODES", "1000"))
WORKERS = int(os.environ.get("BENCH_SCALE_WORKERS", "10240"))
GROUPS = int(os.environ.get("BENCH_SCALE_GROUPS", "64"))
JOBS = int(os.environ.get("BENCH_SCALE_JOBS", "20000"))
EDIT = int(os.environ.get("BENCH_SCALE_EDIT", "500"))
EDIT_SAMPLES = int(os.environ.get("BENCH_SCALE_EDIT_SAMPLES", "9"))
MAX_UNAVAILABLE = os.environ.get("BENCH_SCALE_ROLL_LIMIT", "5%")
ROLL = os.environ.get("BENCH_SCALE_ROLL", "1") != "0"
MAX_UNAVAILABLE_VALUE: int | str = int(MAX_UNAVAILABLE) if MAX_UNAVAILABLE.isdigit() else MAX_UNAVAILABLE
ROLL_LIMIT = MaintenanceSpec.model_validate({"maxUnavailable": MAX_UNAVAILABLE_VALUE}).nodes_at_once(WORKERS)
KCM_QPS = os.environ.get("BENCH_SCALE_KCM_QPS", "100")
NODE_GRACE = "30m"
NAME = "big"
USER = f"system:serviceaccount:{NAMESPACE}:{E2E_SERVICE_ACCOUNT}"
CRD_NAME = "slurmclusters.slurm.slurmctl.io"
Figure = tuple[str, float, str]
GB = 1 << 30
SERVER_FIELDS = ("uid", "resourceVersion", "creationTimestamp", "generation", "managedFields", "ownerReferences")


def _listing_every(seconds: float) -> float:
    """How often a probe that lists every worker pod polls: `seconds`, or a second per 500 workers when that is longer.
    Each list is ~8 KB of JSON a pod, and at 3,584 pods one every 0.5-2 s took the bench process's CPU from the
    stand-in slurmrestd it serves (the operator's reads of it timed out, so its node loop saw an outage and wrote no
    condition). The figures these probes time are as coarse (7 s at 3,584 workers)."""
    return max(seconds, WORKERS / 500)


def _cluster_spec(sizes: dict[str, int], cpu: int = 1) -> dict[str, Any]:
    spec = base_spec()
    spec["jail"] = {"volume": {"claimName": "jail"}}
    spec["maintenance"] = {"maxUnavailable": MAX_UNAVAILABLE_VALUE}
    spec["workers"] = [
        {"name": name, "size": size, "resources": {"requests": {"cpu": cpu, "memory": "1Gi"}}}
        for name, size in sizes.items()
    ]
    return spec


class Figures(list[Figure]):
    """The figures measured so far, each printed (to stderr) as it comes."""

    def append(self, figure: Figure) -> None:
        name, value, unit = figure
        print(f"# {name} {value:.6g} {unit}", file=sys.stderr, flush=True)
        super().append(figure)


async def _wait(probe: Any, *, within: float, interval: float = 0.5, what: str) -> float:
    """Seconds until `probe()` is true; RuntimeError naming `what` at the deadline."""
    started = time.monotonic()
    while not await probe():
        if time.monotonic() - started > within:
            raise RuntimeError(f"timed out after {within:g}s waiting for {what}")
        await asyncio.sleep(interval)
    return time.monotonic() - started


async def _jail(api: client.ApiClient, namespace: str) -> None:
    core = client.CoreV1Api(api)
    pv = f"{namespace}-jail"
    await core.create_persistent_volume(
        {"metadata": {"name": pv}, "spec": {
            "capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteMany"], "storageClassName": "",
            "hostPath": {"path": "/nonexistent/kwok-jail"}, "claimRef": {"namespace": namespace, "name": "jail"}}},
        _request_timeout=10,
    )  # fmt: skip
    await core.create_namespaced_persistent_volume_claim(
        namespace,
        {"metadata": {"name": "jail"}, "spec": {"accessModes": ["ReadWriteMany"], "storageClassName": "",
                                                 "volumeName": pv, "resources": {"requests": {"storage": "1Gi"}}}},
        _request_timeout=10,
    )  # fmt: skip


async def _worker_pods(api: client.ApiClient, namespace: str) -> list[dict[str, Any]]:
    """The worker pods as plain JSON, uncompressed: turning thousands into client models every poll took more CPU than
    the API server, and gzip costs both sides CPU, in the process that also serves the stand-in slurmrestd (which
    then answered the operator late)."""
    response = await client.CoreV1Api(api).list_namespaced_pod(
        namespace, label_selector=f"{meta.LABEL_COMPONENT}=workers", _request_timeout=120, _preload_content=False,
        _headers=UNCOMPRESSED,
    )  # fmt: skip
    items: list[dict[str, Any]] = msgspec.json.decode(await response.read())["items"]
    return items


def _live_running(pod: dict[str, Any]) -> bool:
    return pod.get("status", {}).get("phase") == "Running" and not pod["metadata"].get("deletionTimestamp")


def _cpu(pod: dict[str, Any]) -> str | None:
    """The slurmd container's CPU request (the roll changes it)."""
    slurmd = next(c for c in pod["spec"]["containers"] if c["name"] == "slurmd")
    cpu: str | None = slurmd.get("resources", {}).get("requests", {}).get("cpu")
    return cpu


async def _running(api: client.ApiClient, namespace: str) -> int:
    return sum(1 for p in await _worker_pods(api, namespace) if _live_running(p))


@asynccontextmanager
async def _plane(tmp: Path) -> AsyncIterator[tuple[ControlPlane, client.ApiClient]]:
    state = tmp / "plane"
    os.environ.setdefault("CONTROL_PLANE_CONTROLLER_MANAGER_QPS", KCM_QPS)
    # KWOK's 1,000 leases are renewed late while the machine is busy: past the default 50 s kube-controller-manager
    # marked nodes NotReady and their pods not ready, KWOK never set them ready again, and the run waited on a
    # slurmrestd pod that stayed not ready. This bench simulates no node failure.
    os.environ.setdefault("CONTROL_PLANE_NODE_MONITOR_GRACE_PERIOD", NODE_GRACE)
    up = control_plane_script("up", state)
    if up.returncode != 0:
        control_plane_script("down", state)
        raise RuntimeError(f"control plane did not come up: {up.stderr[-2000:]}")
    plane = ControlPlane(kubeconfig=state / "kubeconfig", state_dir=state)
    api = await config.new_client_from_config(config_file=str(plane.kubeconfig))
    try:
        plane.kubectl("apply", "--server-side", "-k", "config/crd")
        plane.kubectl("wait", "--for=condition=Established", f"crd/{CRD_NAME}", "--timeout=60s")
        plane.kubectl("create", "namespace", NAMESPACE)
        yield plane, api
    finally:
        await api.close()
        control_plane_script("down", state)


async def _plain_loop(api: client.ApiClient, source: str, target: str) -> float:
    """The operator's objects, read back from `source`, applied one by one into `target`: create -> all Running."""
    kinds = [
        ("v1", "ConfigMap", client.CoreV1Api(api).list_namespaced_config_map),
        ("v1", "Secret", client.CoreV1Api(api).list_namespaced_secret),
        ("v1", "Service", client.CoreV1Api(api).list_namespaced_service),
        ("policy/v1", "PodDisruptionBudget", client.PolicyV1Api(api).list_namespaced_pod_disruption_budget),
        ("apps/v1", "Deployment", client.AppsV1Api(api).list_namespaced_deployment),
        ("apps/v1", "StatefulSet", client.AppsV1Api(api).list_namespaced_stateful_set),
    ]
    bodies = []
    for api_version, kind, lister in kinds:
        listed = await lister(source, label_selector=f"{meta.LABEL_INSTANCE}={NAME}", _request_timeout=60)
        for item in listed.items:
            body = api.sanitize_for_serialization(item)
            body["apiVersion"], body["kind"] = api_version, kind
            for key in SERVER_FIELDS:
                body["metadata"].pop(key, None)
            body["metadata"]["namespace"] = target
            body.pop("status", None)
            if kind == "Service":
                body["spec"].pop("clusterIP", None)
                body["spec"].pop("clusterIPs", None)
            bodies.append(body)
    started = time.monotonic()
    for body in bodies:
        name = body["metadata"]["name"]
        group, _, version = body["apiVersion"].rpartition("/")
        plural = body["kind"].lower() + ("es" if body["kind"].endswith("s") else "s")
        base = f"/api/{version}" if not group else f"/apis/{group}/{version}"
        await api.call_api(
            f"{base}/namespaces/{target}/{plural}/{name}", "PATCH",
            query_params=[("fieldManager", "plain-loop"), ("force", "true")],
            header_params={"Content-Type": "application/apply-patch+yaml", "Accept": "application/json"},
            body=body, auth_settings=["BearerToken"], _request_timeout=60, _preload_content=False,
        )  # fmt: skip

    async def all_running() -> bool:
        return await _running(api, target) == WORKERS

    await _wait(all_running, within=3600, interval=_listing_every(2.0), what="the plain loop's workers Running")
    return time.monotonic() - started


async def _measure(tmp: Path) -> list[Figure]:
    figures = Figures()
    async with _plane(tmp) as (plane, api):
        sim = Simulation(plane, tmp, nodes=NODES)
        sim.start_scheduler()
        sim.start_kwok()
        await sim.create_nodes(api)

        async def nodes_ready() -> bool:
            sim.check_alive()
            return await sim.ready_nodes(api) == NODES

        await _wait(nodes_ready, within=600, what=f"{NODES} simulated nodes Ready")
        core, custom = client.CoreV1Api(api), client.CustomObjectsApi(api)
        kubeconfig = e2e_operator_kubeconfig(plane, tmp / "operator-kubeconfig")
        ns = "scale"
        await core.create_namespace({"metadata": {"name": ns}}, _request_timeout=10)
        await _jail(api, ns)
        slurm = FakeSlurm()
        restd = StandInRestd(slurm, cluster=NAME, namespace=ns)
        url = await restd.start(api)
        operator = OperatorProcess(kubeconfig, url, tmp / "operator.log")
        operator.start()
        audit = plane.kubeconfig.parent / "logs" / "audit.log"
        try:
            sizes = dict(groups(WORKERS, GROUPS))
            offset, cpu0 = audit_size(audit), operator.cpu_seconds()
            started = time.monotonic()
            body = {"apiVersion": "slurm.slurmctl.io/v1", "kind": "SlurmCluster", "metadata": {"name": NAME},
                    "spec": _cluster_spec(sizes)}  # fmt: skip
            await custom.create_namespaced_custom_object("slurm.slurmctl.io", "v1", ns, "slurmclusters", body)

            async def all_running() -> bool:
                operator.check_alive()
                return await _running(api, ns) == WORKERS

            await _wait(all_running, within=3600, interval=_listing_every(2.0), what=f"{WORKERS} workers Running")
            create = time.monotonic() - started
            figures.append(("scale_create_workers_running_s", create, "s"))

            async def all_idle() -> bool:
                return sum(1 for n in slurm.table.values() if n.state == {"IDLE"}) == WORKERS

            await _wait(all_idle, within=1800, what="every worker registered and idle in Slurm")

            # Written: every pod's SlurmNodeState condition says Idle (the node loop writes them as Slurm tells).
            await _wait(lambda: _conditions(api, ns, "Idle", WORKERS), within=1800, interval=_listing_every(2.0),
                        what="every worker pod's SlurmNodeState Idle")  # fmt: skip
            settled = await _settle(audit) - started
            writes, _ = operator_writes(audit, offset, USER)
            create_cpu = operator.cpu_seconds() - cpu0
            figures.append(("scale_create_settled_s", settled, goal("s", "conditions written: every pod Idle")))
            figures.append(("scale_create_operator_cpu_s", create_cpu, "s"))
            figures.append(("scale_create_api_writes", sum(writes.values()), "writes"))
            figures.append(("scale_create_api_writes_per_worker", sum(writes.values()) / WORKERS, "writes/worker"))
            figures.append(
                ("scale_create_writes_by_resource", 0, " ".join(f"{k}={v}" for k, v in sorted(writes.items())))
            )

            # Idle: nothing changes; the node loop keeps asking Slurm.
            offset, cpu0, asked = (
                audit_size(audit),
                operator.cpu_seconds(),
                restd.requests[("GET", "/slurm/v0.0.42/nodes/")],
            )
            await asyncio.sleep(30)
            idle_writes, _ = operator_writes(audit, offset, USER)
            passes = restd.requests[("GET", "/slurm/v0.0.42/nodes/")] - asked
            figures.append(("scale_idle_writes_30s", sum(idle_writes.values()), goal("writes", "0")))
            figures.append(("scale_idle_cpu_per_pass_s", (operator.cpu_seconds() - cpu0) / max(passes, 1), "s"))

            # The node loop with JOBS jobs: every node busy, the rest pending.
            restd.submit(JOBS, seconds=3600)
            busy = min(JOBS, WORKERS)  # one job a node (the stand-in gives each job a whole node)
            await _wait(lambda: _conditions(api, ns, "Allocated", busy), within=1800, interval=_listing_every(2.0),
                        what=f"{busy} worker pods' SlurmNodeState Allocated")  # fmt: skip
            await _settle(audit, within=900)
            offset, cpu0, asked = (
                audit_size(audit),
                operator.cpu_seconds(),
                restd.requests[("GET", "/slurm/v0.0.42/nodes/")],
            )
            await asyncio.sleep(45)
            busy_writes, _ = operator_writes(audit, offset, USER)
            passes = restd.requests[("GET", "/slurm/v0.0.42/nodes/")] - asked
            figures.append(
                (f"scale_node_loop_{JOBS}_jobs_cpu_per_pass_s", (operator.cpu_seconds() - cpu0) / max(passes, 1), "s")
            )
            figures.append(
                (
                    f"scale_node_loop_{JOBS}_jobs_writes_per_pass",
                    sum(busy_writes.values()) / max(passes, 1),
                    goal("writes", "0"),
                )
            )
            for run in list(restd.jobs.running.values()):  # end them all now: what follows needs idle nodes
                run.ends_at = 0.0
            restd.jobs.pending.clear()
            slurm.queue = [j for j in slurm.queue if j.state != "PENDING"]
            await _wait(lambda: _true(not restd.jobs.running), within=120, what="jobs ended")
            await _settle(audit, within=900)

            # A size edit, up and down: edit -> the StatefulSet says so.
            group = "g01"
            for delta in (EDIT, -EDIT):
                sizes[group] += delta
                started = time.monotonic()
                figures.append((f"scale_edit_{delta:+d}_statefulset_s", await _edit(api, ns, sizes, group), "s"))

                async def pods_match(want: int = sum(sizes.values())) -> bool:
                    return await _running(api, ns) == want

                await _wait(pods_match, within=1800, interval=_listing_every(0.5), what="pods at the new size")
                figures.append((f"scale_edit_{delta:+d}_done_s", time.monotonic() - started, "s"))
            await _settle(audit, within=900)
            # Edits that need no pod to go, one at a time on a quiet operator: the p50 the goal is set for.
            latencies = []
            for k in range(EDIT_SAMPLES):
                group = f"g{(k + 2) % GROUPS:02}"
                sizes[group] += 1
                latencies.append(await _edit(api, ns, sizes, group))
                await _wait(lambda g=group: _group_ready(api, ns, g, sizes[g]), within=300, interval=0.5,
                            what=f"group {group} ready at {sizes[group]}")  # fmt: skip
                await _settle(audit, within=900)
            if latencies:
                figures.append(
                    (f"scale_edit_p50_of_{EDIT_SAMPLES}_statefulset_ms", statistics.median(latencies) * 1000,
                     goal("ms", "<= 100 (an edit no pod must leave for)"))
                )  # fmt: skip
                figures.append((f"scale_edit_max_of_{EDIT_SAMPLES}_statefulset_ms", max(latencies) * 1000, "ms"))
                # Back to the size created (one edit; the drain gate lets the added nodes go): what follows, and the
                # plain loop that is its floor, are of the same cluster.
                sizes.update(groups(WORKERS, GROUPS))
                await _edit(api, ns, sizes, group)

                async def created_size() -> bool:
                    return await _running(api, ns) == WORKERS

                await _wait(created_size, within=900, interval=_listing_every(0.5), what=f"{WORKERS} workers again")
                await _settle(audit, within=900)

            if ROLL:
                for figure in await _roll(api, ns, sizes, restd):
                    figures.append(figure)

            # Drain storm: every simulated node cordoned, in ten waves.
            started = time.monotonic()
            names = sim.node_names
            wave = max(1, len(names) // 10)
            for i in range(0, len(names), wave):
                await asyncio.gather(
                    *(core.patch_node(n, {"spec": {"unschedulable": True}}) for n in names[i : i + wave])
                )
            figures.append(("scale_drain_storm_cordon_s", time.monotonic() - started, "s"))

            async def all_drained() -> bool:
                # Nodes whose pods a scale-in removed left Slurm (their preStop deleted them).
                return all("DRAIN" in n.state for n in slurm.table.values())

            await _wait(all_drained, within=1800, what="every worker drained in Slurm")
            figures.append(("scale_drain_storm_all_drained_s", time.monotonic() - started, "s"))
            figures.append(("scale_operator_peak_rss_gib", operator.peak_rss_bytes() / GB, goal("GiB", "<= 1")))

            # The floor: the same objects by a plain server-side-apply loop, into a fresh namespace.
            await core.create_namespace({"metadata": {"name": "plain"}}, _request_timeout=10)
            await _jail(api, "plain")
            for n in names:  # uncordon: the plain loop's pods need the nodes
                await core.patch_node(n, {"spec": {"unschedulable": False}})
            operator.stop()
            plain = await _plain_loop(api, ns, "plain")
            figures.insert(0, ("scale_create_vs_plain_loop", create, versus("s", create, plain, goal="<= 1.5x")))
        finally:
            operator.stop()
            await restd.stop()
            await sim.stop(api)
    return figures


async def _roll(api: client.ApiClient, ns: str, sizes: dict[str, int], restd: StandInRestd) -> list[Figure]:
    """A roll of every worker (a restart-requiring template change), one-second jobs running."""
    slurm = restd.slurm
    restd.submit(WORKERS, seconds=1.0)
    started = time.monotonic()
    await _patch_workers(api, ns, sizes, cpu=2)
    worst = 0
    rolling = {f"{meta.worker_group(NAME, g)}-{i}" for g, size in sizes.items() for i in range(size)}

    async def rolled() -> bool:
        nonlocal worst
        # Drained, not responding, or re-created and not registered yet.
        out = out_of_service(slurm, rolling)
        worst = max(worst, len(out))
        if out or restd.jobs.pending or restd.jobs.running:
            return False
        new = [p for p in await _worker_pods(api, ns) if _live_running(p) and _cpu(p) == "2"]
        return len(new) == len(rolling)

    await _wait(rolled, within=3600, interval=0.2, what=f"all {len(rolling)} workers re-created")
    took = time.monotonic() - started
    return [
        ("scale_roll_nodes", len(rolling), f"nodes | maxUnavailable {MAX_UNAVAILABLE}"),
        ("scale_roll_s", took, "s"),
        ("scale_roll_worst_out_of_service", worst, goal("nodes", f"<= {ROLL_LIMIT}")),
        ("scale_roll_jobs_lost", len(restd.jobs.lost), goal("jobs", "0")),
    ]


async def _conditions(api: client.ApiClient, namespace: str, state: str, count: int) -> bool:
    """Whether `count` worker pods' SlurmNodeState conditions say `state`: the node loop has written what Slurm says."""
    reasons = (
        [c.get("reason") for c in p.get("status", {}).get("conditions", []) if c["type"] == "SlurmNodeState"]
        for p in await _worker_pods(api, namespace)
    )
    return sum(1 for found in reasons if found == [state]) == count


async def _true(value: bool) -> bool:
    return value


async def _patch_workers(api: client.ApiClient, ns: str, sizes: dict[str, int], *, cpu: int = 1) -> None:
    """The cluster's worker groups as `sizes` say (`kubectl edit`: a merge patch of spec.workers)."""
    patch = {"spec": {"workers": _cluster_spec(sizes, cpu)["workers"]}}
    await client.CustomObjectsApi(api).patch_namespaced_custom_object(
        "slurm.slurmctl.io", "v1", ns, "slurmclusters", NAME, patch, _content_type="application/merge-patch+json"
    )


async def _edit(api: client.ApiClient, ns: str, sizes: dict[str, int], group: str) -> float:
    """Patch the cluster's groups to `sizes`; seconds from the patch until the group's StatefulSet says its size."""
    started = time.monotonic()
    await _patch_workers(api, ns, sizes)
    want = sizes[group]

    async def replicas() -> bool:
        sts = await client.AppsV1Api(api).read_namespaced_stateful_set(meta.worker_group(NAME, group), ns)
        return bool(sts.spec.replicas == want)

    await _wait(replicas, within=900, interval=0.02, what=f"group {group} at {want}")
    return time.monotonic() - started


async def _group_ready(api: client.ApiClient, ns: str, group: str, want: int) -> bool:
    sts = await client.AppsV1Api(api).read_namespaced_stateful_set(meta.worker_group(NAME, group), ns)
    return bool((sts.status.ready_replicas or 0) == want)


async def _settle(audit: Path, *, quiet: float = 5.0, within: float = 900.0) -> float:
    """Wait until the operator wrote nothing for `quiet` seconds; when it last wrote (time.monotonic())."""
    started = time.monotonic()
    offset, quiet_since = audit_size(audit), time.monotonic()
    while time.monotonic() - quiet_since < quiet:
        if time.monotonic() - started > within:
            raise RuntimeError(f"the operator kept writing for {within:g}s")
        await asyncio.sleep(0.5)
        writes, offset = operator_writes(audit, offset, USER)
        if writes:
            quiet_since = time.monotonic()
    return quiet_since


async def run() -> list[Figure]:
    with tempfile.TemporaryDirectory(prefix="bench-scale-") as tmp:
        started = time.monotonic()
        figures = await _measure(Path(tmp))
        figures.append(("scale_bench_wall_s", time.monotonic() - started, f"s | {NODES} nodes, {WORKERS} workers"))
        return figures
