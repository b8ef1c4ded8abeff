"""What a Slurm administrator reads in the samples' configs: nodes, node sets, partitions, plugins, accounting."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from slurmctl.api.v1 import SlurmCluster, SlurmClusterSpec
from slurmctl.render.slurm_conf import dynamic_node_conf, hold_removed_groups, render_slurm_configs
from slurmctl.render.workers import render_worker_statefulset
from test.unit.render.samples import manifests, sample, sample_doc

CHROOT_LINE = "required /usr/lib/slurmctl/chroot.so jail=/mnt/jail"


def _lines(text: str) -> list[str]:
    return text.splitlines()


def test_minimal_sample_nodes_and_default_partition() -> None:
    cluster = sample("minimal")
    configs = render_slurm_configs(cluster)
    nodes = _lines(configs["nodes.conf"])
    # Workers are dynamic nodes: no file lists them, each registers with its group's definition and feature.
    assert not any(line.startswith("NodeName=") for line in nodes)
    assert dynamic_node_conf(cluster.spec.workers[0]) == "Feature=cpu CPUs=1 RealMemory=1024"
    assert "NodeSet=cpu Feature=cpu" in nodes
    assert "PartitionName=main Nodes=cpu Default=YES State=UP" in nodes

    slurm = _lines(configs["slurm.conf"])
    for line in (
        "ClusterName=minimal",
        "SlurmctldHost=minimal-controller-0(minimal-controller-0.minimal-controller)",
        "AuthType=auth/munge",
        "ProctrackType=proctrack/cgroup",
        "MaxNodeCount=16384",  # MAX_TOTAL_WORKERS: the most the API lets a cluster have
        "TreeWidth=65533",
        "Include /etc/slurm/nodes.conf",
    ):
        assert line in slurm
    # cgroupVersion auto is Slurm's own autodetect: no CgroupPlugin line (docs/slurm-settings.md).
    assert not any(line.startswith("CgroupPlugin") for line in _lines(configs["cgroup.conf"]))
    assert not any(line.startswith(("GresTypes", "AccountingStorage", "HealthCheck")) for line in slurm)
    assert _lines(configs["plugstack.conf"])[1:] == [CHROOT_LINE]
    assert _lines(configs["gres.conf"])[1:] == []


def test_research_sample_groups_partitions_gpus_and_accounting() -> None:
    cluster = sample("research")
    configs = render_slurm_configs(cluster)
    nodes = _lines(configs["nodes.conf"])
    groups = {g.name: dynamic_node_conf(g) for g in cluster.spec.workers}
    assert groups == {
        "h100": "Feature=h100,nvlink CPUs=120 RealMemory=1638400 Gres=gpu:8",
        "cpu": "Feature=cpu,epyc CPUs=30 RealMemory=122880",
    }
    assert "NodeSet=h100 Feature=h100" in nodes
    assert "PartitionName=cpu Nodes=cpu Default=YES State=UP MaxTime=24:00:00" in nodes
    assert "PartitionName=gpu Nodes=h100 Default=NO State=UP MaxTime=72:00:00 OverSubscribe=NO" in nodes

    slurm = _lines(configs["slurm.conf"])
    for line in (
        "GresTypes=gpu",
        "HealthCheckProgram=/usr/lib/slurmctl/gpu-healthcheck",
        "HealthCheckInterval=120",
        "AccountingStorageType=accounting_storage/slurmdbd",
        "AccountingStorageHost=research-accounting",
        "AccountingStoragePort=6819",
        "MaxJobCount=50000",
        "DefMemPerCPU=4096",
    ):
        assert line in slurm
    # The user's raw lines come last, after the nodes include, so they override what is generated.
    assert slurm[-2:] == ["PriorityType=priority/multifactor", "PriorityWeightFairshare=10000"]
    assert slurm.index("Include /etc/slurm/nodes.conf") < slurm.index("PriorityType=priority/multifactor")
    assert "NodeName=research-worker-h100-[0-999] Name=gpu File=/dev/nvidia[0-7]" in _lines(configs["gres.conf"])


def _with_containers(name: str, containers: dict[str, object]) -> SlurmCluster:
    cluster = sample(name)
    spec = cluster.spec.model_dump(by_alias=True, exclude_none=True)
    spec["containers"] = containers
    return cluster.model_copy(update={"spec": SlurmClusterSpec.model_validate(spec)})


def test_container_jobs_are_off_by_default_and_oci_conf_appears_only_when_enabled() -> None:
    assert "oci.conf" not in render_slurm_configs(sample("minimal"))
    configs = render_slurm_configs(_with_containers("minimal", {"enabled": True}))
    oci = dict(line.split("=", 1) for line in _lines(configs["oci.conf"])[1:])
    # One directory per user under a root-owned one on /run (shared with the jail), one per task below it.
    assert oci["ContainerPath"] == "/run/slurm-oci/%U/%j.%s/task-%t"
    assert oci["RunTimeRun"] == '"crun --rootless=true --root=/run/slurm-oci/%U/crun run --bundle %b %n.%u.%j.%s.%t"'
    # What slurmstepd runs as root reads the user's state directory: it runs as the user instead.
    as_user = "setpriv --reuid=%U --regid=$(id -g %U) --init-groups"
    for key in ("RunTimeQuery", "RunTimeKill", "RunTimeDelete"):
        assert oci[key].startswith(f'"{as_user} crun --rootless=true --root=/run/slurm-oci/%U/crun '), oci[key]
    assert "RunTimeCreate" not in oci and "RunTimeStart" not in oci  # RunTimeRun excludes them
    # The jail's plugin still comes first and alone: OCI containers need no SPANK plugin.
    assert _lines(configs["plugstack.conf"])[1:] == [CHROOT_LINE]


def test_pyxis_line_follows_the_jail_plugin_with_its_arguments() -> None:
    configs = render_slurm_configs(_with_containers("minimal", {"pyxis": {"enabled": True}}))
    assert _lines(configs["plugstack.conf"])[1:] == [
        CHROOT_LINE,
        "required spank_pyxis.so container_scope=global execute_entrypoint=0 sbatch_support=1",
    ]
    assert "oci.conf" not in configs  # pyxis brings its own runtime (enroot)
    custom = {"enabled": True, "required": False, "path": "/opt/pyxis/spank_pyxis.so", "arguments": {"remap_root": "1"}}
    configs = render_slurm_configs(_with_containers("minimal", {"pyxis": custom}))
    assert _lines(configs["plugstack.conf"])[2] == "optional /opt/pyxis/spank_pyxis.so remap_root=1"


@pytest.mark.parametrize(
    ("containers", "privileged_jobs", "env"),
    [
        ({}, False, {}),
        ({}, True, {"SLURMCTL_PRIVILEGED_JOBS": "yes"}),
        ({"enabled": True}, False, {"SLURMCTL_USER_NAMESPACES": "yes"}),
        ({"pyxis": {"enabled": True}}, False, {"SLURMCTL_USER_NAMESPACES": "yes"}),
        (
            {"enabled": True, "pyxis": {"enabled": True}},
            True,
            {"SLURMCTL_PRIVILEGED_JOBS": "yes", "SLURMCTL_USER_NAMESPACES": "yes"},
        ),
    ],
    ids=["default", "privileged-jobs", "containers", "pyxis", "both"],
)
def test_the_worker_pod_names_what_the_plugin_leaves_out_of_a_tasks_confinement(
    containers: dict[str, object], privileged_jobs: bool, env: dict[str, str]
) -> None:
    """chroot.so runs every task with no-new-privileges, an empty capability bounding set and a seccomp filter
    refusing new user namespaces: SLURMCTL_PRIVILEGED_JOBS (--allow-privileged-jobs) lifts the first two, and
    SLURMCTL_USER_NAMESPACES the filter, for container steps (crun rootless, enroot) only. The pod says so, never
    plugstack.conf, whose chroot line stays the same whatever the policy."""
    cluster = _with_containers("minimal", containers)
    (group,) = cluster.spec.workers
    configs = render_slurm_configs(cluster)
    set_ = render_worker_statefulset(
        cluster, group, replicas=1, configs=configs, munge_key_id="k", privileged_jobs=privileged_jobs
    )
    (slurmd,) = [c for c in set_["spec"]["template"]["spec"]["containers"] if c["name"] == "slurmd"]
    confine = {
        e["name"]: e["value"]
        for e in slurmd["env"]
        if e["name"] in ("SLURMCTL_PRIVILEGED_JOBS", "SLURMCTL_USER_NAMESPACES")
    }
    assert confine == env
    assert _lines(configs["plugstack.conf"])[1] == CHROOT_LINE


def test_pyxis_arguments_cannot_smuggle_lines_or_words() -> None:
    with pytest.raises(ValidationError):
        _with_containers("minimal", {"pyxis": {"enabled": True, "arguments": {"x": "1\nrequired /tmp/evil.so"}}})
    with pytest.raises(ValidationError):
        _with_containers("minimal", {"pyxis": {"enabled": True, "path": "a.so b=1"}})


def test_enforcement_is_on_only_when_the_spec_declares_accounts_or_qos() -> None:
    cluster = sample("research")  # accounting enabled, no accounts or qos
    slurm = _lines(render_slurm_configs(cluster)["slurm.conf"])
    assert "AccountingStorageTRES=gres/gpu" in slurm  # it has GPU groups
    assert not any(line.startswith("AccountingStorageEnforce") for line in slurm)
    spec = cluster.spec.model_dump(by_alias=True, exclude_none=True)
    spec["accounting"]["qos"] = [{"name": "small", "maxJobsPerUser": 1}]
    limited = cluster.model_copy(update={"spec": SlurmClusterSpec.model_validate(spec)})
    assert "AccountingStorageEnforce=associations,limits,qos" in _lines(render_slurm_configs(limited)["slurm.conf"])


def _elastic(**autoscale: object) -> SlurmCluster:
    cluster = sample("minimal")
    spec = cluster.spec.model_dump(by_alias=True, exclude_none=True)
    spec["workers"][0]["autoscale"] = {"max": 3, **autoscale}
    return cluster.model_copy(update={"spec": SlurmClusterSpec.model_validate(spec)})


def test_an_elastic_group_is_a_range_of_cloud_nodes_with_its_own_power_settings() -> None:
    configs = render_slurm_configs(_elastic(min=1, idleTime="15m", resumeTimeout="90s"))
    nodes = _lines(configs["nodes.conf"])
    assert "NodeName=minimal-worker-cpu-[0-2] State=CLOUD Feature=cpu CPUs=1 RealMemory=1024" in nodes
    assert "NodeSet=cpu Feature=cpu" in nodes  # the same node set: every partition of the group has the range
    power = (
        "PartitionName=slurmctl-power-cpu Nodes=cpu Hidden=YES State=INACTIVE Default=NO SuspendTime=900 "
        "ResumeTimeout=90"
    )
    assert power in nodes
    slurm = _lines(configs["slurm.conf"])
    for line in (
        "SuspendProgram=/bin/true",
        "ResumeProgram=/usr/lib/slurmctl/resume-nodes",
        "SuspendTimeout=45",
        "SlurmctldParameters=idle_on_node_suspend",
        "SuspendExcNodes=minimal-worker-cpu-[0-2]:1",
        "PrologSlurmctld=/usr/lib/slurmctl/await-nodes",
    ):
        assert line in slurm
    # The global SuspendTime stays INFINITE: only the elastic group's nodes are ever powered down.
    assert not any(line.startswith(("SuspendTime=", "ResumeTimeout=")) for line in slurm)


def test_fixed_size_groups_render_no_power_saving() -> None:
    for name in ("minimal", "research"):
        configs = render_slurm_configs(sample(name))
        text = configs["slurm.conf"] + configs["nodes.conf"]
        for word in ("Suspend", "Resume", "CLOUD", "SlurmctldParameters", "slurmctl-power-", "PrologSlurmctld"):
            assert word not in text, (name, word)
    min_zero = render_slurm_configs(_elastic())
    assert "SuspendExcNodes" not in min_zero["slurm.conf"], "min 0: no node is kept up (':0' would mean all of them)"


def test_a_prolog_slurmctld_of_extra_config_is_kept_instead_of_await_nodes() -> None:
    """The admin allowed the key (--allowed-slurm-keys) and the user set it: theirs is the only PrologSlurmctld line
    (two would leave it to Slurm's parser which one counts), and jobs from zero wait for the periodic pass again."""
    cluster = _elastic()
    spec = cluster.spec.model_dump(by_alias=True, exclude_none=True)
    spec["slurm"] = {**spec.get("slurm", {}), "extraConfig": "PrologSlurmctld=/opt/site/prolog\n"}
    cluster = cluster.model_copy(update={"spec": SlurmClusterSpec.model_validate(spec)})
    slurm = render_slurm_configs(cluster)["slurm.conf"]
    assert [line for line in slurm.splitlines() if line.startswith("PrologSlurmctld")] == [
        "PrologSlurmctld=/opt/site/prolog"
    ]


def _worker_pod_spec(cluster: SlurmCluster) -> dict[str, Any]:
    (sts,) = [m for m in manifests(cluster) if m["kind"] == "StatefulSet" and m["metadata"]["name"].endswith("-cpu")]
    pod: dict[str, Any] = sts["spec"]["template"]["spec"]
    return pod


def _slurmd(pod: dict[str, Any]) -> dict[str, Any]:
    (slurmd,) = [c for c in pod["containers"] if c["name"] == "slurmd"]
    return slurmd


def test_private_tmp_is_on_by_default_and_off_leaves_the_workers_without_job_directories() -> None:
    """The worker pod provides the per-job directories and names them to slurmd (its environment, which slurmstepd
    and the chroot plugin inherit): both or neither. plugstack.conf stays the same either way, so a pod made before
    (an older chroot.so, no such volumes) is never handed arguments it cannot honour."""
    cluster = sample("minimal")
    pod = _worker_pod_spec(cluster)
    volumes = {v["name"]: v for v in pod["volumes"]}
    # Per-job /tmp on the node's disk, per-job /dev/shm in memory within the same limit as /dev/shm itself.
    assert volumes["job-tmp"]["emptyDir"] == {}
    assert volumes["job-shm"]["emptyDir"] == volumes["dev-shm"]["emptyDir"]
    assert volumes["job-shm"]["emptyDir"]["medium"] == "Memory"
    slurmd = _slurmd(pod)
    mounts = {m["name"]: m["mountPath"] for m in slurmd["volumeMounts"]}
    env = {e["name"]: e.get("value") for e in slurmd["env"]}
    assert (env["SLURMCTL_JOB_TMP"], env["SLURMCTL_JOB_SHM"]) == (mounts["job-tmp"], mounts["job-shm"])
    assert mounts["job-tmp"].startswith("/var/lib/slurmctl/")  # the node's, outside the jail (/mnt/jail)
    assert _lines(render_slurm_configs(cluster)["plugstack.conf"])[1:] == [CHROOT_LINE]

    spec = cluster.spec.model_dump(by_alias=True, exclude_none=True)
    spec["jail"]["privateTmp"] = False
    shared = cluster.model_copy(update={"spec": SlurmClusterSpec.model_validate(spec)})
    pod = _worker_pod_spec(shared)
    assert not {"job-tmp", "job-shm"} & {v["name"] for v in pod["volumes"]}
    slurmd = _slurmd(pod)
    assert not {"SLURMCTL_JOB_TMP", "SLURMCTL_JOB_SHM"} & {e["name"] for e in slurmd["env"]}
    assert render_slurm_configs(shared)["plugstack.conf"] == render_slurm_configs(cluster)["plugstack.conf"]
    assert not {"SLURMCTL_JOB_TMP_SIZE", "SLURMCTL_JOB_SHM_SIZE"} & {e["name"] for e in slurmd["env"]}


def _job_tmp_env(cluster: SlurmCluster) -> tuple[str, str]:
    env = {e["name"]: e.get("value") for e in _slurmd(_worker_pod_spec(cluster))["env"]}
    return env["SLURMCTL_JOB_TMP_SIZE"], env["SLURMCTL_JOB_SHM_SIZE"]


def _with_spec(cluster: SlurmCluster, change: Any) -> SlurmCluster:
    spec = cluster.spec.model_dump(by_alias=True, exclude_none=True)
    change(spec)
    return cluster.model_copy(update={"spec": SlurmClusterSpec.model_validate(spec)})


def test_job_tmp_sizes_reach_slurmd_in_bytes_group_over_cluster_over_defaults() -> None:
    """spec.workers[].jobTmp, field by field over spec.jail.jobTmp, over 10Gi for /tmp and the group's /dev/shm size
    for /dev/shm: in bytes, as the chroot plugin reads them (jail.h)."""
    cluster = sample("minimal")
    assert _job_tmp_env(cluster) == (str(10 * 2**30), str(64 * 2**30))
    sized = _with_spec(cluster, lambda s: s["workers"][0].update(sharedMemorySize="2Gi"))
    assert _job_tmp_env(sized) == (str(10 * 2**30), str(2 * 2**30))
    sized = _with_spec(sized, lambda s: s["jail"].update(jobTmp={"tmpSize": "1G", "shmSize": "512Mi"}))
    assert _job_tmp_env(sized) == ("1000000000", str(512 * 2**20))
    sized = _with_spec(sized, lambda s: s["workers"][0].update(jobTmp={"shmSize": "64Mi"}))
    assert _job_tmp_env(sized) == ("1000000000", str(64 * 2**20))


def test_submounts_are_nosuid_unless_a_spec_allows_setuid_on_one() -> None:
    def slurmd_env(cluster: SlurmCluster) -> dict[str, str]:
        return {e["name"]: e.get("value", "") for e in _slurmd(_worker_pod_spec(cluster))["env"]}

    cluster = sample("research")
    assert "datasets:/datasets" in slurmd_env(cluster)["JAIL_SUBMOUNTS"]
    assert "JAIL_SUBMOUNTS_SETUID" not in slurmd_env(cluster)  # complement-jail: every sub-mount nosuid,nodev
    spec = cluster.spec.model_dump(by_alias=True, exclude_none=True)
    spec["jail"]["subMounts"][0]["allowSetuid"] = True
    allowed = cluster.model_copy(update={"spec": SlurmClusterSpec.model_validate(spec)})
    assert slurmd_env(allowed)["JAIL_SUBMOUNTS_SETUID"] == "datasets"


def test_a_removed_groups_node_set_and_its_own_partitions_are_held_until_its_statefulset_is_gone() -> None:
    """Removing a group (and the partition that was its alone) while its node still runs a job: Slurm would end the
    job at the next reconfigure for its partition being gone. The group's node set and the partitions the spec
    dropped that named it stay in nodes.conf, as installed, narrowed to the node sets still there and never the
    default; a partition the spec keeps is the spec's; nothing is held once no removed group's StatefulSet is left."""
    doc = sample_doc("minimal")
    doc["spec"]["workers"].append({"name": "extra", "size": 1})
    doc["spec"]["partitions"] = [
        {"name": "main", "default": True},
        {"name": "extra", "workers": ["extra"], "options": {"MaxTime": "01:00:00"}},
        {"name": "both", "workers": ["cpu", "extra"]},
    ]
    installed = render_slurm_configs(SlurmCluster.model_validate(doc))["nodes.conf"]
    doc["spec"]["workers"].pop()
    doc["spec"]["partitions"] = [{"name": "main", "default": True}]
    rendered = render_slurm_configs(SlurmCluster.model_validate(doc))["nodes.conf"]
    assert "extra" not in rendered

    held = hold_removed_groups(rendered, installed, frozenset({"extra"}))
    assert held.startswith(rendered)
    assert _lines(held)[len(_lines(rendered)) + 1 :] == [
        "NodeSet=extra Feature=extra",
        "PartitionName=both Nodes=cpu,extra Default=NO State=UP",
        "PartitionName=extra Nodes=extra Default=NO State=UP MaxTime=01:00:00",
    ]
    assert hold_removed_groups(rendered, installed, frozenset()) == rendered
    assert hold_removed_groups(rendered, rendered, frozenset({"extra"})) == rendered, "held from what is installed"
    # Held again from a file that holds them already (the next pass): the same file.
    assert hold_removed_groups(rendered, held, frozenset({"extra"})) == held
