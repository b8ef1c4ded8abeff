"""The populate-jail gate, accounting, mariadb-operator and the NCCL benchmark against the real control plane, with
the operator running in-process as its own ServiceAccount.

There is no kubelet: a test marks Pods Ready and Running (the real StatefulSet, ReplicaSet and Deployment controllers
turn that into ready counts) and writes the populate-jail Job's status the way the Job controller would once its pod
finished.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import logging
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest
from kubernetes_asyncio import client, watch
from kubernetes_asyncio.client.rest import ApiException

from test.e2e.apiserver_metrics import request_counts
from test.e2e.harness import ControlPlane, eventually
from test.e2e.operator import no_namespace_terminating, operator_writes, reconciles, slurmctl_events
from test.e2e.test_reconcilers import (  # noqa: F401 - the fixtures are used by name
    MERGE_PATCH,
    NAME,
    Cluster,
    T,
    operator,
    operator_kubeconfig,
    spec,
)

# Every test runs against the operator; none needs its handle.
pytestmark = [pytest.mark.e2e, pytest.mark.usefixtures("operator")]

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


def has_status(job: Any, wanted: dict[str, Any]) -> bool:
    """Whether the Job's status still holds what the test wrote (the Job controller may overwrite a status write that
    races with its own first sync)."""
    status = job.status
    counts_match = all(getattr(status, key) == wanted[key] for key in ("succeeded", "failed") if key in wanted)
    types = {c.type for c in status.conditions or [] if c.status == "True"}
    return counts_match and {c["type"] for c in wanted["conditions"]} <= types


class FullCluster(Cluster):
    """The SlurmCluster under test with the part-2 components: the populate-jail Job, accounting, the benchmark."""

    def __init__(self, api: client.ApiClient, namespace: str) -> None:
        super().__init__(api, namespace)
        self.batch = client.BatchV1Api(api)

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
                JOB, self.ns, {"status": status}, _content_type=MERGE_PATCH, _request_timeout=T
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

    async def cronjob_v1beta1(self, name: str) -> dict[str, Any] | None:
        """kubernetes-asyncio no longer has BatchV1beta1Api: read the old version through the generic path."""
        return await absent_on_404(
            lambda: self.custom.get_namespaced_custom_object(
                "batch", "v1beta1", self.ns, "cronjobs", name, _request_timeout=T
            )
        )

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


# ---- populate-jail ------------------------------------------------------------------------------------------------


async def test_jail_gate_holds_workers_and_login_until_the_job_succeeds(api: client.ApiClient, namespace: str) -> None:
    cluster = FullCluster(api, namespace)
    await cluster.create(spec())
    job = await cluster.started_job()
    generation = (await cluster.get())["metadata"]["generation"]
    assert job.metadata.labels["app.kubernetes.io/component"] == "populate-jail"
    assert job.metadata.annotations[GENERATION_ANNOTATION] == str(generation)

    # Both gated components have looked and say what they wait for: the absence below is the gate, not slowness.
    for type_ in ("WorkersReady", "LoginReady"):
        await cluster.wait_condition(type_, "False", "WaitingForJail")
    await cluster.wait_condition("JailPopulated", "False", "Populating")
    await cluster.resyncs(2, ("workers", "login"))
    gated = (f"{NAME}-worker-cpu", f"{NAME}-login")
    assert await cluster.statefulsets(*gated) == {}

    written = await cluster.finish_job(SUCCEEDED)

    async def both_exist() -> bool:
        return len(await cluster.statefulsets(*gated)) == 2

    await eventually(both_exist, timeout=10, interval=0.005, what="the worker and login StatefulSets")
    latency = time.monotonic() - written
    print(f"\nJob succeeded -> worker and login StatefulSets exist: {latency * 1000:.0f} ms")
    assert latency < 1.0, f"the StatefulSets took {latency:.2f}s after the Job succeeded"
    populated = await cluster.wait_condition("JailPopulated", "True", "Populated")
    assert populated["observedGeneration"] == generation


async def test_failed_job_reports_degrades_and_tears_nothing_down(api: client.ApiClient, namespace: str) -> None:
    cluster = FullCluster(api, namespace)
    await cluster.create(spec())

    async def controller_exists() -> bool:
        return bool(await cluster.statefulsets(f"{NAME}-controller"))

    await eventually(controller_exists, timeout=30, what="the controller StatefulSet")
    await cluster.started_job()
    await cluster.resyncs(2)  # everything the gate lets through has been created
    before = {key: obj.metadata.uid for key, obj in (await cluster.children()).items()}

    await cluster.finish_job(FAILED)
    failed = await cluster.wait_condition("JailPopulated", "False", "JobFailed")
    assert "BackoffLimitExceeded" in failed["message"]
    assert "Job has reached the specified backoff limit" in failed["message"]
    await cluster.wait_phase("Degraded")
    event = await cluster.wait_event("Warning", "PopulateJailFailed", contains="BackoffLimitExceeded")
    assert event.involved_object.name == NAME

    await cluster.resyncs(2)
    after = {key: obj.metadata.uid for key, obj in (await cluster.children()).items()}
    assert after == before, "a failed Job must neither remove nor re-create anything (the Job included)"
    for type_ in ("WorkersReady", "LoginReady"):
        assert (await cluster.condition(type_) or {}).get("reason") == "WaitingForJail"
    assert await cluster.phase() == "Degraded"


async def test_overwrite_reruns_the_job_exactly_once_and_keeps_the_nodes(api: client.ApiClient, namespace: str) -> None:
    cluster = FullCluster(api, namespace)
    nodes = (f"{NAME}-worker-cpu", f"{NAME}-login")
    async with job_uids(api, namespace) as uids:
        await cluster.create(spec())
        await cluster.finish_job(SUCCEEDED)

        async def nodes_exist() -> dict[str, str] | None:
            found = await cluster.statefulsets(*nodes)
            return found if len(found) == 2 else None

        node_uids = await eventually(nodes_exist, timeout=30, what="the worker and login StatefulSets")
        await cluster.wait_condition("JailPopulated", "True", "Populated")
        first = await cluster.job()
        assert first is not None

        generation = await cluster.merge({"populateJail": {"overwrite": True}})

        async def rerun() -> Any | None:
            job = await cluster.job()
            return job if job is not None and job.metadata.uid != first.metadata.uid else None

        second = await eventually(rerun, timeout=30, what="the populate-jail Job to be re-created")
        assert second.metadata.annotations[GENERATION_ANNOTATION] == str(generation)
        overwriting = await cluster.wait_condition("JailPopulated", "False", "Overwriting")
        assert "overwrite" in overwriting["message"]
        assert await cluster.statefulsets(*nodes) == node_uids, "an overwrite in progress must tear nothing down"

        await cluster.finish_job(SUCCEEDED, not_uid=first.metadata.uid)
        populated = await cluster.wait_condition("JailPopulated", "True", "Populated")
        assert populated["observedGeneration"] == generation

        await cluster.resyncs(3, ("populate-jail",))
        final = await cluster.job()
        assert final is not None
        assert final.metadata.uid == second.metadata.uid, "the overwrite must run once per generation"
        assert uids == {first.metadata.uid, second.metadata.uid}
    assert await cluster.statefulsets(*nodes) == node_uids


# ---- accounting ---------------------------------------------------------------------------------------------------


async def test_accounting_waits_for_the_password_secret_recovers_and_never_leaks_it(
    api: client.ApiClient, namespace: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="slurmctl")
    password = f"pw-{uuid.uuid4().hex}"
    cluster = FullCluster(api, namespace)
    await cluster.create(accounting_spec())

    missing = await cluster.wait_condition("AccountingReady", "False", "PasswordSecretMissing")
    assert f"{namespace}/{PASSWORD_SECRET}" in missing["message"]
    assert PASSWORD_KEY in missing["message"]
    await cluster.wait_event("Warning", "PasswordSecretMissing", contains=f"{namespace}/{PASSWORD_SECRET}")

    # A missing database password stops accounting only: the jail is populated and the workers become ready.
    await cluster.finish_job(SUCCEEDED)

    async def workers_ready() -> bool:
        return (await cluster.condition("WorkersReady") or {}).get("status") == "True"

    await cluster.ready_until(workers_ready, what="WorkersReady=True without accounting")
    assert (await cluster.condition("AccountingReady") or {}).get("reason") == "PasswordSecretMissing"

    await cluster.create_password_secret(password)

    async def slurmdbd_secret() -> Any | None:
        return await cluster.secret(f"{NAME}-slurmdbd")

    dbd = await eventually(slurmdbd_secret, timeout=30, what=f"Secret {NAME}-slurmdbd")
    conf = base64.b64decode(dbd.data["slurmdbd.conf"]).decode()
    assert f"StoragePass={password}\n" in conf
    assert "StorageHost=db.example.com\n" in conf
    service = await cluster.service(f"{NAME}-accounting")
    assert service is not None
    assert [p.port for p in service.spec.ports] == [6819]

    async def accounting_ready() -> bool:
        cond = await cluster.condition("AccountingReady") or {}
        return (cond.get("status"), cond.get("reason")) == ("True", "Ready")

    await cluster.ready_until(accounting_ready, what="AccountingReady=True once slurmdbd's pod is ready")
    deployment = await cluster.deployment(f"{NAME}-accounting")
    assert deployment is not None
    assert deployment.status.available_replicas == 1
    slurm_conf = (await cluster.configmap(f"{NAME}-slurm-configs"))["slurm.conf"]
    assert "AccountingStorageType=accounting_storage/slurmdbd" in slurm_conf

    await cluster.merge({"accounting": {"enabled": False}})

    async def removed() -> bool:
        return (
            await cluster.secret(f"{NAME}-slurmdbd") is None
            and await cluster.service(f"{NAME}-accounting") is None
            and await cluster.deployment(f"{NAME}-accounting") is None
        )

    await eventually(removed, timeout=30, what="the slurmdbd Secret, Service and Deployment to be removed")

    async def conf_without_accounting() -> bool:
        conf = (await cluster.configmap(f"{NAME}-slurm-configs")).get("slurm.conf", "")
        return bool(conf) and "AccountingStorageType" not in conf

    await eventually(conf_without_accounting, timeout=30, what="slurm.conf without AccountingStorageType")
    assert await cluster.secret(PASSWORD_SECRET) is not None, "the user's password Secret is not slurmctl's to delete"

    # The capture works (it holds the operator's own report of the missing Secret) and never holds the password.
    operator_records = [r for r in caplog.records if r.name.startswith("slurmctl")]
    assert any("PasswordSecretMissing" in r.getMessage() for r in operator_records)
    assert password not in caplog.text
    assert not [r.getMessage() for r in caplog.records if password in r.getMessage()]
    events = await cluster.events()
    assert any(e.source is not None and e.source.component == "slurmctl" for e in events)
    assert not [e.message for e in events if password in (e.message or "")]


async def test_mariadb_needs_its_operator_and_is_created_once_the_crd_is_installed(
    api: client.ApiClient, namespace: str, installed: ControlPlane
) -> None:
    cluster = FullCluster(api, namespace)
    await cluster.create({**spec(), "accounting": {"enabled": True, "mariadb": {"enabled": True}}})
    missing = await cluster.wait_condition("AccountingReady", "False", "MariaDBOperatorMissing")
    assert "mariadb-operator" in missing["message"]

    installed.kubectl("apply", "-f", "-", input=MARIADB_CRD)
    try:
        installed.kubectl("wait", "--for=condition=Established", "crd/mariadbs.k8s.mariadb.com", "--timeout=30s")

        async def mariadb() -> dict[str, Any] | None:
            return await absent_on_404(
                lambda: cluster.custom.get_namespaced_custom_object(
                    "k8s.mariadb.com", "v1alpha1", namespace, "mariadbs", f"{NAME}-mariadb", _request_timeout=T
                )
            )

        await eventually(mariadb, timeout=60, interval=0.5, what=f"MariaDB {NAME}-mariadb")

        async def passwords() -> Any | None:
            return await cluster.secret(f"{NAME}-mariadb-passwords")

        await eventually(passwords, timeout=30, what=f"Secret {NAME}-mariadb-passwords")
    finally:
        installed.kubectl("delete", "crd", "mariadbs.k8s.mariadb.com", "--ignore-not-found", "--timeout=60s")


# ---- NCCL benchmark -----------------------------------------------------------------------------------------------


async def test_nccl_benchmark_cronjob_uses_batch_v1beta1_on_1_20_and_suspends_when_disabled(
    api: client.ApiClient, namespace: str
) -> None:
    cluster = FullCluster(api, namespace)
    await cluster.create(gpu_spec(benchmark=True))
    name = f"{NAME}-nccl-benchmark"

    async def cronjob_suspended_is(suspend: bool) -> dict[str, Any] | None:
        cronjob = await cluster.cronjob_v1beta1(name)
        return cronjob if cronjob is not None and cronjob["spec"].get("suspend") is suspend else None

    cronjob = await eventually(lambda: cronjob_suspended_is(False), timeout=30, what=f"CronJob {name} (v1beta1)")
    assert cronjob["spec"]["concurrencyPolicy"] == "Forbid"
    await cluster.wait_condition("BenchmarkScheduled", "True", "Scheduled")
    # This control plane does not serve batch/v1 CronJobs, so the object above is the fallback, not a second copy.
    with pytest.raises(ApiException) as not_served:
        await client.BatchV1Api(api).read_namespaced_cron_job(name, namespace, _request_timeout=T)
    assert not_served.value.status == 404

    await cluster.merge({"healthChecks": {"ncclBenchmark": {"enabled": False}}})
    await eventually(lambda: cronjob_suspended_is(True), timeout=30, what=f"CronJob {name} suspended")
    await cluster.wait_condition("BenchmarkScheduled", "False", "Disabled")


# ---- steady state -------------------------------------------------------------------------------------------------


async def test_steady_state_costs_zero_writes_with_every_component(api: client.ApiClient, namespace: str) -> None:
    cluster = FullCluster(api, namespace)
    await cluster.create_password_secret(f"pw-{uuid.uuid4().hex}")
    await cluster.create(accounting_spec(gpu_spec(benchmark=True)))
    await cluster.finish_job(SUCCEEDED)

    async def available() -> bool:
        return await cluster.phase() == "Available"

    await cluster.ready_until(available, what="phase Available with accounting and the benchmark")
    assert (await cluster.condition("AccountingReady") or {}).get("status") == "True"
    await cluster.wait_condition("BenchmarkScheduled", "True", "Scheduled")

    await no_namespace_terminating(api)
    await cluster.resyncs(2)
    events_before = await slurmctl_events(api, namespace)
    before = await request_counts(api)
    await cluster.resyncs(5)
    after = await request_counts(api)
    assert operator_writes(before, after) == {}, "a converged cluster with every component must cost no API writes"
    assert await slurmctl_events(api, namespace) == events_before, "no Event from slurmctl either"
