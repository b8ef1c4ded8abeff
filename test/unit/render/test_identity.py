"""The identity Job: what it is told to write (one record per group, user and key, each with the field path its
messages name), with which privileges, and when it is a new run."""

from __future__ import annotations

from typing import Any

from slurmctl.api.v1 import SlurmCluster
from slurmctl.render.identity import (
    CAPABILITIES,
    IDENTITY_HASH_ANNOTATION,
    KEYS_DIR,
    identity_hash,
    render_identity_job,
    render_records,
)
from slurmctl.render.manifests import Inputs, identity_objects
from slurmctl.render.slurm_conf import JAIL_PATH
from slurmctl.render.sshd import render_sshd_config
from test.unit.render.samples import sample_doc

KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIKeyForTests ada@example"
IDENTITY = {
    "groups": [{"name": "research", "gid": 3000}],
    "users": [
        {"name": "ada", "uid": 2000, "groups": ["research"], "sshAuthorizedKeys": [KEY]},
        {"name": "bob", "uid": 2001, "gid": 3000, "shell": "/bin/sh", "home": "/data/home/bob"},
    ],
}


def _cluster(identity: dict[str, Any] | None = None, **spec: Any) -> SlurmCluster:
    doc = sample_doc("minimal")
    if identity is not None:
        doc["spec"]["identity"] = identity
    doc["spec"].update(spec)
    return SlurmCluster.model_validate(doc)


def _container(job: dict[str, Any]) -> dict[str, Any]:
    (container,) = job["spec"]["template"]["spec"]["containers"]
    return container


def test_the_records_name_every_entry_by_its_field_and_give_a_user_without_gid_their_own_group() -> None:
    assert render_records(_cluster(IDENTITY).spec.identity).splitlines() == [
        "group\tspec.identity.groups[0].name\tspec.identity.groups[0].gid\tresearch\t3000",
        "group\tspec.identity.users[0].name\tspec.identity.users[0].uid\tada\t2000",
        "user\tspec.identity.users[0]\tada\t2000\t2000\tresearch\t/bin/bash\t/home/ada",
        f"key\tada\t{KEY}",
        "user\tspec.identity.users[1]\tbob\t2001\t3000\t-\t/bin/sh\t/data/home/bob",
    ]


def test_the_job_runs_the_sync_with_only_the_capabilities_it_needs_and_no_token() -> None:
    job = render_identity_job(_cluster(IDENTITY))
    assert job["metadata"]["name"] == "minimal-identity"
    pod = job["spec"]["template"]["spec"]
    assert pod["automountServiceAccountToken"] is False
    assert pod["restartPolicy"] == "Never"
    container = _container(job)
    assert container["command"] == ["/usr/lib/slurmctl/sync-identity"]
    context = container["securityContext"]
    assert context["capabilities"] == {"drop": ["ALL"], "add": list(CAPABILITIES)}
    assert context["allowPrivilegeEscalation"] is False
    assert set(CAPABILITIES) <= {"CHOWN", "DAC_OVERRIDE", "FOWNER"}
    env = {e["name"]: e["value"] for e in container["env"]}
    assert env["IDENTITY"] == render_records(_cluster(IDENTITY).spec.identity)
    assert container["terminationMessagePolicy"] == "FallbackToLogsOnError"
    assert {"name": "jail", "mountPath": JAIL_PATH} in container["volumeMounts"]


def test_a_new_run_for_every_change_of_what_it_writes_and_none_for_a_status_change() -> None:
    base = identity_hash(_cluster(IDENTITY))
    assert render_identity_job(_cluster(IDENTITY))["metadata"]["annotations"] == {IDENTITY_HASH_ANNOTATION: base}
    changed = {**IDENTITY, "users": [{**IDENTITY["users"][0], "sshAuthorizedKeys": []}]}  # type: ignore[dict-item]
    assert identity_hash(_cluster(changed)) != base
    cluster = _cluster(IDENTITY)
    cluster.metadata.generation = 7
    assert identity_hash(cluster) == base


def test_nothing_declared_renders_no_job() -> None:
    assert identity_objects(Inputs.offline(_cluster())) == []
    assert [o["kind"] for o in identity_objects(Inputs.offline(_cluster(IDENTITY)))] == ["Job"]


def test_sshd_reads_the_declared_users_keys_from_the_file_the_job_keeps() -> None:
    config = render_sshd_config(_cluster())
    line = next(line for line in config.splitlines() if line.startswith("AuthorizedKeysFile "))
    assert line.split()[1:] == [
        ".ssh/authorized_keys",
        f"{JAIL_PATH}%h/.ssh/authorized_keys",
        f"{JAIL_PATH}{KEYS_DIR}/%u",
    ]


def test_the_job_mounts_only_the_sub_mounts_a_home_lies_on() -> None:
    sub_mounts = [
        {"name": "scratch", "mountPath": "/scratch", "volume": {"source": {"emptyDir": {}}}},
        {"name": "homes", "mountPath": "/data/home", "volume": {"claimName": "homes"}},
    ]
    cluster = _cluster(IDENTITY, jail={"volume": {"claimName": "jail"}, "subMounts": sub_mounts})
    job = render_identity_job(cluster)
    assert job["spec"]["template"]["spec"]["volumes"] == [
        {"name": "jail", "persistentVolumeClaim": {"claimName": "jail"}},
        {"name": "submount-homes", "persistentVolumeClaim": {"claimName": "homes"}},
    ]
    container = _container(job)
    assert container["volumeMounts"][1] == {"name": "submount-homes", "mountPath": "/mnt/jail-submounts/homes"}
    env = {e["name"]: e["value"] for e in container["env"]}
    assert env["JAIL_SUBMOUNTS"] == "homes:/data/home"
    assert _container(render_identity_job(_cluster(IDENTITY)))["volumeMounts"] == [
        {"name": "jail", "mountPath": JAIL_PATH}
    ]
