"""The SlurmCluster under test and what the reconciler e2e tests need around it: specs, the admin-side reads and
writes that stand in for the kubelet and the Job controller, and waits with deadlines.

There is no kubelet: a test that needs workloads to look ready marks their Pods Ready and Running (the real
StatefulSet, ReplicaSet and Deployment controllers turn that into ready counts), and writes the populate-jail Job's
status the way the Job controller would once its pod finished.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import UTC, datetime
from typing import Any

from kubernetes_asyncio import client, watch
from kubernetes_asyncio.client.rest import ApiException

from test import timing
from test.e2e.harness import eventually
from test.e2e.operator import reconciles

T = 10
GROUP, VERSION, PLURAL = "slurm.slurmctl.io", "v1", "slurmclusters"
JSON_PATCH = "application/json-patch+json"
MERGE_PATCH = "application/merge-patch+json"
NAME = "c1"


def spec(size: int = 2) -> dict[str, Any]:
    return {
        "jail": {"volume": {"claimName": "jail"}},
        "workers": [{"name": "cpu", "size": size, "resources": {"requests": {"cpu": 2, "memory": "4Gi"}}}],
        "login": {"sshRootPublicKeys": ["ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIKeyForTests test@example"]},
    }


JOB = f"{NAME}-populate-jail"
GENERATION_ANNOTATION = "slurm.slurmctl.io/populate-generation"
COMPONENTS = ("cluster", "controller", "workers", "login", "populate-jail", "accounting", "benchmark")
PASSWORD_SECRET, PASSWORD_KEY = "accounting-db", "dbpass"
SUCCEEDED = {"succeeded": 1, "conditions": [{"type": "Complete", "status": "True"}]}
FAILED = {
    "failed": 4,
    "conditions": [
        {
            "type": "Failed",
            "status": "True",
            "reason": "BackoffLimitExceeded",
            "message": "Job has reached the specified backoff limit",
        }
    ],
}
MARIADB_CRD = """
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: mariadbs.k8s.mariadb.com
spec:
  group: k8s.mariadb.com
  scope: Namespaced
  names: {kind: MariaDB, listKind: MariaDBList, plural: mariadbs, singular: mariadb}
  versions:
  - name: v1alpha1
    served: true
    storage: true
    schema:
      openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}
"""


def accounting_spec(base: dict[str, Any] | None = None) -> dict[str, Any]:
    """An accounting-enabled spec with an external database whose password is in PASSWORD_SECRET."""
    out = base or spec()
    out["accounting"] = {
        "enabled": True,
        "external": {
            "host": "db.example.com",
            "user": "slurm",
            "passwordSecretRef": {"name": PASSWORD_SECRET, "key": PASSWORD_KEY},
        },
    }
    return out


def gpu_spec(*, benchmark: bool = True) -> dict[str, Any]:
    out = spec()
    out["workers"].append(
        {"name": "gpu", "size": 1, "gpus": 1, "resources": {"requests": {"cpu": 4, "memory": "16Gi"}}}
    )
    out["healthChecks"] = {"ncclBenchmark": {"enabled": benchmark}}
    return out


async def absent_on_404(read: Callable[[], Awaitable[Any]]) -> Any | None:
    """The object `read` returns, or None when the API server says it does not exist."""
    try:
        return await read()
    except ApiException as exc:
        if exc.status == 404:
            return None
        raise


def terminal_status(status: dict[str, Any]) -> dict[str, Any]:
    """`status` (SUCCEEDED or FAILED) as the Job controller writes a finished Job's: the API server refuses a Complete
    condition without SuccessCriteriaMet and a completionTime, a Failed one without FailureTarget, and active pods in
    a finished Job."""
    kinds = {c["type"] for c in status["conditions"]}
    leads = {"Complete": "SuccessCriteriaMet", "Failed": "FailureTarget"}
    before = [{"type": leads[k], "status": "True"} for k in leads if k in kinds]
    finished: dict[str, Any] = {**status, "active": 0, "conditions": [*before, *status["conditions"]]}
    if "Complete" in kinds:
        finished["completionTime"] = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    return finished


def has_status(job: Any, wanted: dict[str, Any]) -> bool:
    """Whether the Job's status still holds what the test wrote (the Job controller may overwrite a status write that
    races with its own first sync)."""
    status = job.status
    counts_match = all(getattr(status, key) == wanted[key] for key in ("succeeded", "failed") if key in wanted)
    types = {c.type for c in status.conditions or [] if c.status == "True"}
    return counts_match and {c["type"] for c in wanted["conditions"]} <= types


class Cluster:
    """The SlurmCluster under test and the objects around it, read through the admin client."""

    def __init__(self, api: client.ApiClient, namespace: str) -> None:
        self.ns = namespace
        self.custom = client.CustomObjectsApi(api)
        self.core = client.CoreV1Api(api)
        self.apps = client.AppsV1Api(api)
        self.batch = client.BatchV1Api(api)
        self.networking = client.NetworkingV1Api(api)
        self.rbac = client.RbacAuthorizationV1Api(api)

    async def create(self, body_spec: dict[str, Any]) -> None:
        body = {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": "SlurmCluster",
            "metadata": {"name": NAME},
            "spec": body_spec,
        }
        await self.custom.create_namespaced_custom_object(GROUP, VERSION, self.ns, PLURAL, body, _request_timeout=T)

    async def get(self) -> dict[str, Any]:
        obj: dict[str, Any] = await self.custom.get_namespaced_custom_object(
            GROUP, VERSION, self.ns, PLURAL, NAME, _request_timeout=T
        )
        return obj

    async def patch(self, ops: list[dict[str, Any]]) -> None:
        await self.custom.patch_namespaced_custom_object(
            GROUP, VERSION, self.ns, PLURAL, NAME, ops, _content_type=JSON_PATCH, _request_timeout=T
        )

    async def condition(self, type_: str) -> dict[str, Any] | None:
        status = (await self.get()).get("status") or {}
        return next((c for c in status.get("conditions") or [] if c["type"] == type_), None)

    async def phase(self) -> str | None:
        return ((await self.get()).get("status") or {}).get("phase")

    async def wait_phase(self, phase: str, timeout: float = 30) -> None:
        """Wait for `phase`; a wait for Available is charged to the module's "to Available" (test.timing)."""

        async def reached() -> bool:
            return await self.phase() == phase

        start = time.monotonic()
        await eventually(reached, timeout=timeout, what=f"phase {phase}")
        if phase == "Available":
            timing.record_available(time.monotonic() - start)

    async def sts(self, name: str) -> Any:
        return await self.apps.read_namespaced_stateful_set(name, self.ns, _request_timeout=T)

    async def replicas(self, name: str) -> int | None:
        try:
            return int((await self.sts(name)).spec.replicas)
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise

    async def configmap(self, name: str) -> dict[str, str]:
        """The ConfigMap's data; empty while it does not exist yet."""
        try:
            cm = await self.core.read_namespaced_config_map(name, self.ns, _request_timeout=T)
        except ApiException as exc:
            if exc.status == 404:
                return {}
            raise
        return dict(cm.data or {})

    async def populate_jail(self) -> None:
        """Mark the populate-jail Job succeeded, as the Job controller would once its pod finished the copy (nothing
        to do when it already is: a finished Job counts no active pod, so it would never look started again)."""
        job = await self.job()
        if job is not None and (job.status.succeeded or 0) >= 1:
            return
        await self.finish_job(SUCCEEDED)

    async def make_pods_ready(self) -> int:
        """Mark every pod of the cluster Running and Ready, as a kubelet would once the containers pass probes."""
        pods = await self.core.list_namespaced_pod(
            self.ns, label_selector=f"app.kubernetes.io/instance={NAME}", _request_timeout=T
        )
        ready = {"type": "Ready", "status": "True", "lastTransitionTime": "2026-01-01T00:00:00Z"}
        for pod in pods.items:
            if pod.status.phase != "Running":
                await self.core.patch_namespaced_pod_status(
                    pod.metadata.name,
                    self.ns,
                    {"status": {"phase": "Running", "conditions": [ready]}},
                    _content_type="application/strategic-merge-patch+json",
                    _request_timeout=T,
                )
        return len(pods.items)

    async def become_available(self, expected_pods: int) -> None:
        """Stand in for the kubelet and the Job controller until the cluster is Available; the wait is charged to the
        module's "to Available" (test.timing)."""
        start = time.monotonic()
        await self.populate_jail()

        async def all_ready() -> bool:
            await self.make_pods_ready()
            return await self.phase() == "Available"

        await eventually(all_ready, timeout=60, interval=0.3, what=f"phase Available with {expected_pods} pods ready")
        timing.record_available(time.monotonic() - start)

    async def children(self) -> dict[tuple[str, str], Any]:
        selector = f"app.kubernetes.io/instance={NAME}"
        found: dict[tuple[str, str], Any] = {}
        for kind, lister in (
            ("ConfigMap", self.core.list_namespaced_config_map),
            ("Secret", self.core.list_namespaced_secret),
            ("Service", self.core.list_namespaced_service),
            ("StatefulSet", self.apps.list_namespaced_stateful_set),
            ("Deployment", self.apps.list_namespaced_deployment),
            ("Job", self.batch.list_namespaced_job),
            ("NetworkPolicy", self.networking.list_namespaced_network_policy),
            ("ServiceAccount", self.core.list_namespaced_service_account),
            ("Role", self.rbac.list_namespaced_role),
            ("RoleBinding", self.rbac.list_namespaced_role_binding),
        ):
            for item in (await lister(self.ns, label_selector=selector, _request_timeout=T)).items:
                found[(kind, item.metadata.name)] = item
        return found

    async def merge(self, body_spec: dict[str, Any]) -> int:
        """Merge-patch the spec; the new generation."""
        obj = await self.custom.patch_namespaced_custom_object(
            "slurm.slurmctl.io",
            "v1",
            self.ns,
            "slurmclusters",
            NAME,
            {"spec": body_spec},
            _content_type=MERGE_PATCH,
            _request_timeout=T,
        )
        return int(obj["metadata"]["generation"])

    async def job(self) -> Any | None:
        return await absent_on_404(lambda: self.batch.read_namespaced_job(JOB, self.ns, _request_timeout=T))

    async def started_job(self, *, not_uid: str | None = None) -> Any:
        """The populate-jail Job once the Job controller has started it (created its pod and counted it active), so a
        status the test writes does not race with the controller's first sync."""

        async def started() -> Any | None:
            job = await self.job()
            if job is None or job.metadata.uid == not_uid or not (job.status.active or 0):
                return None
            return job

        return await eventually(started, timeout=30, what="the populate-jail Job to be started")

    async def finish_job(self, status: dict[str, Any], *, not_uid: str | None = None) -> float:
        """Write the Job's status through its status subresource and keep it written; returns the monotonic time of
        the write that stuck."""
        await self.started_job(not_uid=not_uid)
        written = time.monotonic()

        async def stuck() -> bool:
            nonlocal written
            job = await self.job()
            assert job is not None, "the populate-jail Job vanished"
            if has_status(job, status):
                return True
            written = time.monotonic()
            await self.batch.patch_namespaced_job_status(
                JOB, self.ns, {"status": terminal_status(status)}, _content_type=MERGE_PATCH, _request_timeout=T
            )
            return False

        await eventually(stuck, timeout=10, interval=0.05, what=f"the Job status {status} to stay written")
        return written

    async def wait_condition(self, type_: str, status: str, reason: str, *, timeout: float = 30) -> dict[str, Any]:
        async def reached() -> dict[str, Any] | None:
            cond = await self.condition(type_)
            return cond if cond is not None and (cond["status"], cond["reason"]) == (status, reason) else None

        what = f"condition {type_}={status} reason {reason}"
        cond: dict[str, Any] = await eventually(reached, timeout=timeout, what=what)
        return cond

    async def statefulsets(self, *names: str) -> dict[str, str]:
        """uid by name of those of the StatefulSets that exist."""
        found = {}
        for name in names:
            sts = await absent_on_404(lambda name=name: self.sts(name))
            if sts is not None:
                found[name] = sts.metadata.uid
        return found

    async def secret(self, name: str) -> Any | None:
        return await absent_on_404(lambda: self.core.read_namespaced_secret(name, self.ns, _request_timeout=T))

    async def service(self, name: str) -> Any | None:
        return await absent_on_404(lambda: self.core.read_namespaced_service(name, self.ns, _request_timeout=T))

    async def deployment(self, name: str) -> Any | None:
        return await absent_on_404(lambda: self.apps.read_namespaced_deployment(name, self.ns, _request_timeout=T))

    async def events(self) -> list[Any]:
        return list((await self.core.list_namespaced_event(self.ns, _request_timeout=T)).items)

    async def wait_event(self, type_: str, reason: str, *, contains: str) -> Any:
        async def found() -> Any | None:
            return next(
                (e for e in await self.events() if (e.type, e.reason) == (type_, reason) and contains in e.message),
                None,
            )

        return await eventually(found, timeout=30, what=f"a {type_} event {reason} mentioning {contains!r}")

    async def create_password_secret(self, password: str) -> None:
        body = {"metadata": {"name": PASSWORD_SECRET}, "stringData": {PASSWORD_KEY: password}}
        await self.core.create_namespaced_secret(self.ns, body, _request_timeout=T)

    async def ready_until(self, probe: Callable[[], Awaitable[bool]], *, what: str, timeout: float = 60) -> None:
        """Keep marking the cluster's pods ready (workloads create them as they go) until `probe` holds."""

        async def ready() -> bool:
            await self.make_pods_ready()
            return await probe()

        await eventually(ready, timeout=timeout, interval=0.3, what=what)

    async def resyncs(self, periods: int, components: tuple[str, ...] = COMPONENTS) -> None:
        """Wait until every component reconciled `periods` more times (each resync reconciles every cluster)."""
        start = {c: reconciles(c) for c in components}

        async def resynced() -> bool:
            return all(reconciles(c) >= start[c] + periods for c in components)

        await eventually(resynced, timeout=60, what=f"{periods} reconciles of {', '.join(components)}")


@contextlib.asynccontextmanager
async def job_uids(api: client.ApiClient, namespace: str) -> AsyncIterator[set[str]]:
    """Every populate-jail Job uid that exists in the namespace while the block runs, seen through a watch (a Job
    deleted and re-created between two polls would be missed by polling). A watch opened late still starts with every
    existing Job, so nothing before the block's first step is lost."""
    seen: set[str] = set()
    batch = client.BatchV1Api(api)

    async def follow() -> None:
        while True:
            stream = watch.Watch()
            try:
                async for event in stream.stream(
                    batch.list_namespaced_job, namespace, timeout_seconds=120, _request_timeout=130
                ):
                    if event["object"].metadata.name == JOB:
                        seen.add(event["object"].metadata.uid)
            finally:
                await stream.close()

    task = asyncio.create_task(follow())
    try:
        yield seen
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
