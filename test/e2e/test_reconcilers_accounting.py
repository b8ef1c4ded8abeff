"""Accounting against the real control plane: the external database's password Secret, and mariadb-operator."""

from __future__ import annotations

import base64
import logging
import uuid
from typing import Any

import pytest
from kubernetes_asyncio import client

from test.e2e.clusters import (
    MARIADB_CRD,
    NAME,
    PASSWORD_KEY,
    PASSWORD_SECRET,
    SUCCEEDED,
    Cluster,
    T,
    absent_on_404,
    accounting_spec,
    spec,
)
from test.e2e.harness import ControlPlane, eventually

# Every test runs against the operator; none needs its handle.
pytestmark = [pytest.mark.e2e, pytest.mark.usefixtures("operator")]


async def test_accounting_waits_for_the_password_secret_recovers_and_never_leaks_it(
    api: client.ApiClient, namespace: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="slurmctl")
    password = f"pw-{uuid.uuid4().hex}"
    cluster = Cluster(api, namespace)
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
    # Applied after the Secret, in the same pass or the next: waited for (CI once looked in between, under load).
    service = await eventually(lambda: cluster.service(f"{NAME}-accounting"), timeout=30, what="the slurmdbd Service")
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
    cluster = Cluster(api, namespace)
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
