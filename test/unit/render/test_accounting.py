"""slurmdbd's config, workload and database: where the password goes, and where it never goes."""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest

from slurmctl.api.v1 import SlurmCluster
from slurmctl.reconcilers.registry import desired_objects
from slurmctl.render import accounting
from slurmctl.render.manifests import Inputs
from test.unit.render.samples import DBD_PASSWORD, all_objects, manifests, sample, sample_doc


def _is_slurmdbd(obj: dict[str, Any]) -> bool:
    return obj["kind"] == "Deployment" and obj["metadata"]["name"].endswith("-accounting")


def _conf(variant: str) -> list[str]:
    return accounting.render_slurmdbd_conf(sample(variant), dbd_password=DBD_PASSWORD).splitlines()


def test_slurmdbd_conf_for_an_external_database() -> None:
    lines = _conf("research")
    for line in (
        "AuthType=auth/munge",
        "DbdHost=research-accounting",
        "DbdPort=6819",
        "SlurmUser=slurm",
        "StorageType=accounting_storage/mysql",
        "StorageHost=mysql.databases.svc.cluster.local",
        "StoragePort=3306",
        "StorageUser=slurm",
        "StorageLoc=slurm_acct_db",
        f"StoragePass={DBD_PASSWORD}",
    ):
        assert line in lines
    assert not any(line.startswith("LogFile") for line in lines)
    assert any(line.startswith("PidFile=") for line in lines)


def test_slurmdbd_conf_for_mariadb_talks_to_the_mariadb_service() -> None:
    lines = _conf("research-mariadb")
    assert {"StorageHost=research-mariadb", "StoragePort=3306", "StorageUser=slurm"} <= set(lines)


def test_the_password_source_is_the_referenced_or_the_generated_secret() -> None:
    external = accounting.database(sample("research"))
    assert (external.password_secret, external.password_key) == ("research-accounting-db", "password")
    mariadb = accounting.database(sample("research-mariadb"))
    assert (mariadb.password_secret, mariadb.password_key) == ("research-mariadb-passwords", "password")


def test_the_dbd_host_is_the_pod_hostname() -> None:
    """slurmdbd exits at start unless DbdHost names its own host."""
    (deployment,) = [o for o in manifests(sample("research")) if _is_slurmdbd(o)]
    assert deployment["spec"]["template"]["spec"]["hostname"] == "research-accounting"
    assert deployment["spec"]["strategy"] == {"type": "Recreate"}
    assert "DbdHost=research-accounting" in _conf("research")


@pytest.mark.parametrize("variant", ["research", "research-mariadb"])
def test_the_password_appears_only_base64_encoded_in_secrets(variant: str) -> None:
    encoded = base64.b64encode(DBD_PASSWORD.encode()).decode()
    for obj in all_objects(sample(variant)):
        text = json.dumps(obj)
        assert DBD_PASSWORD not in text, obj["metadata"]["name"]
        if obj["kind"] != "Secret":
            assert encoded not in text


def test_the_slurmdbd_secret_holds_the_conf_where_the_entrypoint_reads_it() -> None:
    cluster = sample("research")
    secret = accounting.render_slurmdbd_secret(cluster, dbd_password=DBD_PASSWORD)
    conf = base64.b64decode(secret["data"]["slurmdbd.conf"]).decode()
    assert conf == accounting.render_slurmdbd_conf(cluster, dbd_password=DBD_PASSWORD)
    (deployment,) = [o for o in manifests(cluster) if _is_slurmdbd(o)]
    pod = deployment["spec"]["template"]["spec"]
    (volume,) = [v for v in pod["volumes"] if v.get("secret", {}).get("secretName") == "research-slurmdbd"]
    (mount,) = [m for m in pod["containers"][0]["volumeMounts"] if m["name"] == volume["name"]]
    assert mount["mountPath"] == "/mnt/slurmdbd-config"  # entrypoint-accounting's SLURMDBD_CONF_SOURCE directory
    assert [c["name"] for c in pod["containers"]] == ["slurmdbd"]
    assert [(c["name"], c["restartPolicy"]) for c in pod["initContainers"]] == [("munge", "Always")]  # a sidecar


def test_a_new_password_rolls_slurmdbd_through_its_id() -> None:
    cluster = sample("research")

    def hash_(password_id: str) -> str:
        (deployment,) = [o for o in manifests(cluster, dbd_password_id=password_id) if _is_slurmdbd(o)]
        return str(deployment["spec"]["template"]["metadata"]["annotations"]["slurm.slurmctl.io/config-hash"])

    assert hash_("rv-1") != hash_("rv-2")
    assert hash_("rv-1") == hash_("rv-1")


@pytest.mark.parametrize("password", ["", "with space", "hash#tag", 'quo"te', "back\\slash", "new\nline", "tab\t"])
def test_a_password_slurmdbd_conf_cannot_carry_is_refused_without_echoing_it(password: str) -> None:
    with pytest.raises(ValueError, match="database password") as err:
        accounting.render_slurmdbd_conf(sample("research"), dbd_password=password)
    if password:
        assert password not in str(err.value)


def test_offline_rendering_leaves_the_slurmdbd_secret_out() -> None:
    names = [o["metadata"]["name"] for o in desired_objects(Inputs.offline(sample("research")))]
    assert "research-slurmdbd" not in names
    assert {"research-accounting"} <= set(names)


def test_mariadb_resource_and_its_passwords() -> None:
    cluster = sample("research-mariadb")
    (mariadb,) = [o for o in manifests(cluster) if o["kind"] == "MariaDB"]
    assert mariadb["metadata"]["name"] == "research-mariadb"
    spec = mariadb["spec"]
    assert spec["storage"] == {"size": "50Gi", "storageClassName": "fast-ssd"}
    assert (spec["database"], spec["username"]) == ("slurm_acct_db", "slurm")
    secret = accounting.render_mariadb_secret(cluster, password="p4ss", root_password="r00t")
    refs = (spec["passwordSecretKeyRef"], spec["rootPasswordSecretKeyRef"])
    assert {ref["name"] for ref in refs} == {secret["metadata"]["name"]}
    decoded = {k: base64.b64decode(v).decode() for k, v in secret["data"].items()}
    assert decoded[spec["passwordSecretKeyRef"]["key"]] == "p4ss"
    assert decoded[spec["rootPasswordSecretKeyRef"]["key"]] == "r00t"


def test_disabled_accounting_renders_nothing_of_it() -> None:
    doc = sample_doc("research")
    doc["spec"]["accounting"]["enabled"] = False
    objects = manifests(SlurmCluster.model_validate(doc))
    assert not [o for o in objects if o["metadata"]["labels"]["app.kubernetes.io/component"] == "accounting"]
    assert "AccountingStorage" not in next(o for o in objects if o["kind"] == "ConfigMap")["data"]["slurm.conf"]
