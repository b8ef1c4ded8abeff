"""Every rendered object is one a current API server accepts: kubernetes-validate, Kubernetes 1.30, strict (unknown
fields are errors). The MariaDB resource is not a built-in kind: it is checked against mariadb-operator's field
names."""

from __future__ import annotations

from typing import Any

import kubernetes_validate
import pytest

from slurmctl.render.accounting import MARIADB_API_VERSION, MARIADB_KIND
from test.unit.render.samples import VARIANTS, all_objects, manifests, sample

KUBERNETES_VERSION = "1.30"
# MariaDBSpec fields of mariadb-operator (api/v1alpha1/mariadb_types.go) that slurmctl sets, with their JSON types.
MARIADB_SPEC_FIELDS = {
    "rootPasswordSecretKeyRef": dict,
    "username": str,
    "passwordSecretKeyRef": dict,
    "database": str,
    "port": int,
    "replicas": int,
    "storage": dict,
    "image": str,
    "resources": dict,
}
MARIADB_STORAGE_FIELDS = {"size", "storageClassName"}


def _objects(variant: str) -> list[dict[str, Any]]:
    return [obj for obj in all_objects(sample(variant)) if obj["apiVersion"] != MARIADB_API_VERSION]


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_every_object_passes_strict_validation(variant: str) -> None:
    objects = _objects(variant)
    assert objects
    for obj in objects:
        try:
            kubernetes_validate.validate(obj, KUBERNETES_VERSION, strict=True)
        except kubernetes_validate.ValidationError as exc:
            pytest.fail(f"{obj['kind']} {obj['metadata']['name']}: {exc.message} at {list(exc.path)}")


def test_the_batch_v1_cronjob_passes_strict_validation() -> None:
    cronjobs = [obj for obj in manifests(sample("research")) if obj["kind"] == "CronJob"]
    assert [obj["apiVersion"] for obj in cronjobs] == ["batch/v1"]
    kubernetes_validate.validate(cronjobs[0], KUBERNETES_VERSION, strict=True)


def test_the_mariadb_resource_uses_only_mariadb_operator_fields() -> None:
    (mariadb,) = [obj for obj in all_objects(sample("research-mariadb")) if obj["kind"] == MARIADB_KIND]
    assert mariadb["apiVersion"] == "k8s.mariadb.com/v1alpha1"
    spec = mariadb["spec"]
    for field, value in spec.items():
        assert field in MARIADB_SPEC_FIELDS, f"spec.{field} is not a MariaDB field"
        assert isinstance(value, MARIADB_SPEC_FIELDS[field]), f"spec.{field} has the wrong type"
    assert set(spec["storage"]) <= MARIADB_STORAGE_FIELDS
    for ref in ("rootPasswordSecretKeyRef", "passwordSecretKeyRef"):
        assert set(spec[ref]) == {"name", "key"}


def _pod_specs(obj: dict[str, Any]) -> list[dict[str, Any]]:
    spec = obj.get("spec") or {}
    if obj["kind"] == "CronJob":
        spec = spec["jobTemplate"]["spec"]
    return [spec["template"]["spec"]] if "template" in spec else []


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_no_pod_gets_a_service_account_token(variant: str) -> None:
    """complement-jail binds /run into the jail: a token there would be readable by users' jobs."""
    pod_specs = {obj["metadata"]["name"]: _pod_specs(obj) for obj in all_objects(sample(variant))}
    with_pods = {name: specs for name, specs in pod_specs.items() if specs}
    assert len(with_pods) >= 4
    for name, specs in with_pods.items():
        assert [s.get("automountServiceAccountToken") for s in specs] == [False], name
