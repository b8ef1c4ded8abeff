"""The operator's policy (api/v1/policy.py): every way issue 37 found for an editor of a SlurmCluster to become root on
a node is refused by the default policy, naming the field, and accepted only with the matching opt-in of the
operator's install."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from slurmctl.api.v1 import OPEN_POLICY, Policy, check_cluster
from slurmctl.api.v1.policy import (
    CONTROL_PLANE_LABELS,
    DEFAULT_VOLUME_SOURCES,
    TUNING_PARTITION_OPTIONS,
    TUNING_SLURM_KEYS,
)
from slurmctl.render.manifests import Inputs, workers_objects
from slurmctl.render.slurm_conf import render_slurm_conf
from test.unit.api.helpers import sample_clusters

KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIKeyForTests test@example"
DEFAULT = Policy()


def cluster(**spec: Any) -> dict[str, Any]:
    base: dict[str, Any] = {"jail": {"volume": {"claimName": "jail"}}, "workers": [{"name": "cpu", "size": 1}]}
    return {
        "apiVersion": "slurm.slurmctl.io/v1",
        "kind": "SlurmCluster",
        "metadata": {"name": "p", "namespace": "hpc"},
        "spec": {**base, **spec},
    }


def sub_mount(source: dict[str, Any]) -> dict[str, Any]:
    mount = {"name": "m", "mountPath": "/m", "volume": {"source": source}}
    return {"jail": {"volume": {"claimName": "jail"}, "subMounts": [mount]}}


def worker(**placement: Any) -> dict[str, Any]:
    return {"workers": [{"name": "cpu", "size": 1, **placement}]}


def required(key: str, operator: str = "Exists") -> dict[str, Any]:
    term = {"matchExpressions": [{"key": key, "operator": operator}]}
    return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [term]}}}


CONTROL_PLANE = "node-role.kubernetes.io/control-plane"
MASTER = "node-role.kubernetes.io/master"
AFFINITY_FIELD = (
    "spec.workers[0].affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0]"
    ".matchExpressions[0]"
)
# (spec, image prefixes, the field refused, the opt-in that accepts it, or None where nothing should)
BYPASSES: dict[str, tuple[dict[str, Any], tuple[str, ...], str, Policy | None]] = {
    "root login": (
        {"login": {"sshRootPublicKeys": [KEY]}}, (), "spec.login.sshRootPublicKeys",
        Policy(allow_root_logins=True),
    ),
    "owned keys + PlugStackConfig into the jail": (
        {"slurm": {"extraConfig": "PlugStackConfig=/jail/evil.conf\n", "allowOperatorOwnedKeys": True}}, (),
        "spec.slurm.extraConfig", Policy(allowed_slurm_keys=frozenset({"PlugStackConfig"})),
    ),
    "owned keys + Include into the jail": (
        {"slurm": {"extraConfig": "Include /jail/evil.conf\n", "allowOperatorOwnedKeys": True}}, (),
        "spec.slurm.extraConfig", None,
    ),
    "secret sub-mount": (
        sub_mount({"secret": {"secretName": "p-munge"}}), (), "spec.jail.subMounts[0].volume.source.secret",
        Policy(allowed_volume_sources=frozenset({"secret"})),
    ),
    "gitRepo volume": (
        sub_mount({"gitRepo": {"repository": "https://example.com/x.git"}}), (),
        "spec.jail.subMounts[0].volume.source.gitRepo", Policy(allowed_volume_sources=frozenset({"gitRepo"})),
    ),
    "nfs jail": (
        {"jail": {"volume": {"source": {"nfs": {"server": "nfs.example.com", "path": "/"}}}}}, (),
        "spec.jail.volume.source.nfs", Policy(allowed_volume_sources=frozenset({"nfs"})),
    ),
    "hostPath sub-mount": (
        sub_mount({"hostPath": {"path": "/"}}), (), "spec.jail.subMounts[0].volume.source.hostPath",
        Policy(allow_host_path=True),
    ),
    "toleration of the control-plane taint": (
        worker(tolerations=[{"key": CONTROL_PLANE, "operator": "Exists", "effect": "NoSchedule"}]), (),
        "spec.workers[0].tolerations[0]", Policy(allow_control_plane_nodes=True),
    ),
    "toleration of every taint": (
        {"login": {"tolerations": [{"operator": "Exists"}]}}, (), "spec.login.tolerations[0]",
        Policy(allow_control_plane_nodes=True),
    ),
    "toleration of the old master taint": (
        {"controller": {"tolerations": [{"key": MASTER, "operator": "Exists"}]}}, (),
        "spec.controller.tolerations[0]", Policy(allow_control_plane_nodes=True),
    ),
    "nodeSelector onto the control plane": (
        worker(nodeSelector={CONTROL_PLANE: ""}), (), f"spec.workers[0].nodeSelector.{CONTROL_PLANE}",
        Policy(allow_control_plane_nodes=True),
    ),
    "required affinity onto the control plane": (
        worker(affinity=required(CONTROL_PLANE)), (), AFFINITY_FIELD, Policy(allow_control_plane_nodes=True),
    ),
    "extraConfig TaskPlugin": (
        {"slurm": {"extraConfig": "TaskPlugin=task/none\n"}}, (), "spec.slurm.extraConfig",
        Policy(allowed_slurm_keys=frozenset({"TaskPlugin"})),
    ),
    "extraConfig PrologFlags": (
        {"slurm": {"extraConfig": "PrologFlags=Alloc\n"}}, (), "spec.slurm.extraConfig",
        Policy(allowed_slurm_keys=frozenset({"prologflags"})),
    ),
    "extraConfig SlurmctldLogFile": (
        {"slurm": {"extraConfig": "SlurmctldLogFile=/etc/cron.d/x\n"}}, (), "spec.slurm.extraConfig",
        Policy(allowed_slurm_keys=frozenset({"SlurmctldLogFile"})),
    ),
    "extraConfig CertmgrType": (
        {"slurm": {"extraConfig": "CertmgrType=certmgr/script\n"}}, (), "spec.slurm.extraConfig",
        Policy(allowed_slurm_keys=frozenset({"*"})),
    ),
    "partition option outside the allowlist": (
        {"partitions": [{"name": "main", "default": True, "options": {"DisableRootJobs": "NO"}}]}, (),
        "spec.partitions[0].options.DisableRootJobs", Policy(allowed_slurm_keys=frozenset({"DisableRootJobs"})),
    ),
    "pyxis": (
        {"containers": {"pyxis": {"enabled": True, "path": "/jail/evil.so"}}}, (), "spec.containers.pyxis",
        Policy(allowed_slurm_keys=frozenset({"PyxisPath"})),
    ),
    "replaceUnhealthy without the node-cordon opt-in": (
        worker(replaceUnhealthy=True), (), "spec.workers[0].replaceUnhealthy", Policy(allow_node_cordon=True),
    ),
    "image next to the allowed prefix": (
        worker(image="ghcr.io/slurmctl-evil/worker:1"), ("ghcr.io/slurmctl/",), "spec.workers[0].image", None,
    ),
}  # fmt: skip


def problems(spec: dict[str, Any], policy: Policy) -> list[tuple[str, str]]:
    return [(p.path, p.message) for p in check_cluster(cluster(**spec), policy=policy)[1]]


@pytest.mark.parametrize("case", BYPASSES)
def test_each_bypass_is_refused_by_default_naming_the_field_and_accepted_only_with_its_opt_in(case: str) -> None:
    spec, images, field, opt_in = BYPASSES[case]
    default = replace(DEFAULT, allowed_images=images)
    refused = problems(spec, default)
    assert [path for path, _ in refused] == [field], refused
    assert "operator" in refused[0][1], refused
    if opt_in is not None:
        assert problems(spec, replace(opt_in, allowed_images=images)) == []
    else:
        # Nothing in the policy admits it: an image beside the prefix, an Include.
        assert [path for path, _ in problems(spec, replace(OPEN_POLICY, allowed_images=images))] == [field]


def test_a_spec_of_ordinary_tuning_passes_the_default_policy() -> None:
    """What the samples, docs and tests set is tuning: the default policy takes it without an opt-in."""
    spec = {
        "slurm": {"extraConfig": "".join(f"{key}=1\n" for key in TUNING_SLURM_KEYS)},
        "partitions": [{"name": "main", "default": True, "options": dict.fromkeys(TUNING_PARTITION_OPTIONS, "1")}],
        "jail": {"volume": {"claimName": "jail"}, "subMounts": [
            {"name": f"m{i}", "mountPath": f"/m{i}", "volume": {"source": {source: {}}}}
            for i, source in enumerate(DEFAULT_VOLUME_SOURCES) if source != "persistentVolumeClaim"
        ]},
        **worker(
            tolerations=[{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
            affinity=required(CONTROL_PLANE, "DoesNotExist"),
            nodeSelector={"pool": "gpu"},
        ),
    }  # fmt: skip
    assert [p for p in problems(spec, DEFAULT) if "polic" in p[1]] == []


def test_the_samples_keys_are_tuning() -> None:
    research = sample_clusters()["slurmcluster_research.yaml"]
    opted_in = Policy(allow_host_path=True, allowed_volume_sources=frozenset({"nfs"}), allow_root_logins=True)
    assert check_cluster(research, policy=opted_in)[1] == []
    assert {p.path for p in check_cluster(research)[1]} == {
        "spec.jail.subMounts[0].volume.source.nfs",
        "spec.jail.subMounts[1].volume.source.hostPath",
        "spec.login.sshRootPublicKeys",
    }


def test_an_allowed_key_is_matched_without_case_and_include_never() -> None:
    assert DEFAULT.allows_key("schedulerparameters", TUNING_SLURM_KEYS)
    assert not DEFAULT.allows_key("Prolog", TUNING_SLURM_KEYS)
    assert not OPEN_POLICY.allows_key("include", TUNING_SLURM_KEYS)
    assert set(CONTROL_PLANE_LABELS) == {CONTROL_PLANE, MASTER}


def test_an_image_prefix_must_end_with_a_slash() -> None:
    with pytest.raises(ValueError, match="must end with '/'"):
        Policy(allowed_images=("ghcr.io/slurmctl",))


@pytest.mark.parametrize(
    ("policy", "expected"),
    [(DEFAULT, ["DisableRootJobs=YES"]), (Policy(allow_root_jobs=True), [])],
)
def test_root_jobs_are_disabled_in_slurm_conf_unless_the_operator_allows_them(
    policy: Policy, expected: list[str]
) -> None:
    parsed, found = check_cluster(cluster(), policy=policy)
    assert parsed is not None and found == []
    conf = Inputs.offline(parsed, root_jobs=policy.allow_root_jobs).configs["slurm.conf"]
    assert [line for line in conf.splitlines() if line.startswith("DisableRootJobs")] == expected
    assert "DisableRootJobs" not in render_slurm_conf(parsed), "the renderer alone keeps today's output"


@pytest.mark.parametrize(
    ("policy", "env"),
    [
        (DEFAULT, []),
        (Policy(allow_privileged_jobs=True), ["SLURMCTL_PRIVILEGED_JOBS"]),
        (OPEN_POLICY, ["SLURMCTL_PRIVILEGED_JOBS"]),
    ],
)
def test_job_tasks_are_confined_unless_the_operator_allows_privileged_jobs(policy: Policy, env: list[str]) -> None:
    parsed, found = check_cluster(cluster(), policy=policy)
    assert parsed is not None and found == []
    rendered = workers_objects(Inputs.offline(parsed, privileged_jobs=policy.allow_privileged_jobs))
    workers = [o for o in rendered if o["kind"] == "StatefulSet"]
    assert workers
    for workers_set in workers:
        names = [e["name"] for c in workers_set["spec"]["template"]["spec"]["containers"] for e in c.get("env", [])]
        assert [n for n in names if n == "SLURMCTL_PRIVILEGED_JOBS"] == env


def test_no_tuning_key_names_a_program_plugin_or_path() -> None:
    """The allowlists hold no key that runs or loads code, or names a file (see TUNING_SLURM_KEYS)."""
    risky = ("prolog", "epilog", "program", "prog", "plugin", "file", "dir", "location", "include", "certmgr",
             "auth", "cred", "disableroot", "plugstack", "path")  # fmt: skip
    flags = {"prologepilogtimeout", "jobfileappend"}  # a timeout, and whether job output files are appended to
    for key in (*TUNING_SLURM_KEYS, *TUNING_PARTITION_OPTIONS):
        lower = key.lower()
        assert not any(word in lower for word in risky) or lower in flags, key
