"""Objects the `workers` component owns: one slurmd StatefulSet per worker group and their headless Service."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from slurmctl.api.v1 import SlurmCluster, SlurmClusterSpec, WorkerGroup, parse_quantity
from slurmctl.render import meta, pods
from slurmctl.render.slurm_conf import OCI_CONF, dynamic_node_conf, restart_settings
from slurmctl.render.sshd import sshd_mounts, sshd_volumes
from slurmctl.render.sssd import add_sssd

COMPONENT = "workers"
# The preStop (images/scripts/worker-prestop: drain, wait for jobs, leave Slurm) takes at most about 17 s, then slurmd
# stops, then munged (a native sidecar: render/pods.py munge_container).
GRACE_SECONDS = 30
# The component label of worker children made by releases before 0.2 (see reconcilers/workers/reconciler.py).
FORMER_COMPONENTS = ("worker",)
WORKER_PRESTOP = "/usr/lib/slurmctl/worker-prestop"
DAEMON_CONTAINER = "slurmd"
# spec.jail.privateTmp: where, on each worker, the chroot plugin makes each job's private /tmp and /dev/shm (a
# directory per job under each, removed when the job ends; native/spank_chroot/jail.h). Outside the jail, so no job
# reaches another's. The pod names them to slurmd (and so to slurmstepd) in its environment, beside the emptyDirs it
# mounts there: a pod has both or neither, and turning the switch rolls the workers like any new pod template.
JOB_TMP_DIR = "/var/lib/slurmctl/job-tmp"
JOB_SHM_DIR = "/var/lib/slurmctl/job-shm"
# Set (to the login nodes' headless Service) when spec.login.sshToJobNodes runs sshd beside slurmd.
SSH_FROM_ENV = "SLURMCTL_SSH_FROM"


def config_hash(configs: Mapping[str, str], *, munge_key_id: str) -> str:
    """slurmd follows its config files (the container installs each change and reconfigures slurmd), so only what
    reconfigure cannot change re-creates workers, one drained node at a time: the restart settings, the munge key,
    and turning container steps on or off (the worker's entrypoint prepares the node for them, see
    images/scripts/entrypoint-worker). `configs` is the rendered config set (`render_slurm_configs`), rendered once
    per reconcile."""
    containers = [OCI_CONF] if OCI_CONF in configs else []  # absent: the hash workers had before this part existed
    return meta.content_hash(restart_settings(configs), munge_key_id, *containers)


def render_workers_service(cluster: SlurmCluster) -> dict[str, Any]:
    """Per-pod DNS `<pod>.<c>-workers`, the NodeAddr of every Slurm node."""
    c = meta.cluster_name(cluster)
    return meta.service(
        cluster, meta.workers_service(c), COMPONENT, port_name="slurmd", port=meta.SLURMD_PORT, headless=True
    )


def render_worker_statefulset(
    cluster: SlurmCluster,
    group: WorkerGroup,
    *,
    replicas: int,
    configs: Mapping[str, str],
    munge_key_id: str,
    cluster_domain: str = meta.DEFAULT_CLUSTER_DOMAIN,
    privileged_jobs: bool = False,
) -> dict[str, Any]:
    """`replicas` is passed separately from `group.size`: scale-in goes through the reconciler's gate first.
    `privileged_jobs`: the operator's --allow-privileged-jobs (confine_env)."""
    c = meta.cluster_name(cluster)
    selector = meta.selector(c, COMPONENT, **{meta.LABEL_WORKER_GROUP: group.name})
    return {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": meta.object_meta(
            cluster, meta.worker_group(c, group.name), COMPONENT, extra_labels={meta.LABEL_WORKER_GROUP: group.name}
        ),
        "spec": {
            "replicas": replicas,
            "serviceName": meta.workers_service(c),
            # Slurm nodes are independent: start and replace them all at once, not one ready pod after another.
            "podManagementPolicy": "Parallel",
            # A new pod template reaches a running node only through the operator, which drains the node first and
            # deletes its pod once no job runs there (reconcilers/workers/plan.py), one node at a time.
            "updateStrategy": {"type": "OnDelete"},
            "selector": {"matchLabels": selector},
            "template": _pod_template(
                cluster,
                group,
                configs=configs,
                munge_key_id=munge_key_id,
                cluster_domain=cluster_domain,
                privileged_jobs=privileged_jobs,
            ),
        },
    }


def render_elastic_worker_pod(
    cluster: SlurmCluster,
    group: WorkerGroup,
    index: int,
    *,
    configs: Mapping[str, str],
    munge_key_id: str,
    cluster_domain: str = meta.DEFAULT_CLUSTER_DOMAIN,
    privileged_jobs: bool = False,
) -> dict[str, Any]:
    """One node of an elastic group (`autoscale`): a pod of its own, created by the operator when Slurm powers the
    node up and deleted when Slurm powers it down (reconcilers/workers/plan.py). No StatefulSet: Slurm picks which
    powered-down nodes it resumes, and a StatefulSet could only add and remove its highest ordinals. The pod is the
    StatefulSet template's, with the DNS name a StatefulSet would give it (`<pod>.<c>-workers`)."""
    c = meta.cluster_name(cluster)
    name = f"{meta.worker_group(c, group.name)}-{index}"
    template = _pod_template(
        cluster,
        group,
        configs=configs,
        munge_key_id=munge_key_id,
        cluster_domain=cluster_domain,
        privileged_jobs=privileged_jobs,
    )
    metadata = meta.object_meta(cluster, name, COMPONENT, extra_labels=template["metadata"]["labels"])
    metadata["annotations"] = {
        **template["metadata"]["annotations"],
        meta.TEMPLATE_HASH_ANNOTATION: template_hash(template),
    }
    spec = {**template["spec"], "hostname": name, "subdomain": meta.workers_service(c)}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec}


def elastic_template_hash(
    cluster: SlurmCluster,
    group: WorkerGroup,
    *,
    configs: Mapping[str, str],
    munge_key_id: str,
    cluster_domain: str = meta.DEFAULT_CLUSTER_DOMAIN,
    privileged_jobs: bool = False,
) -> str:
    """The hash an elastic group's pods made now carry (TEMPLATE_HASH_ANNOTATION): a live pod whose hash differs was
    made from an older template, and is replaced once its node is idle (reconcilers/elastic.py)."""
    template = _pod_template(
        cluster,
        group,
        configs=configs,
        munge_key_id=munge_key_id,
        cluster_domain=cluster_domain,
        privileged_jobs=privileged_jobs,
    )
    return template_hash(template)


def template_hash(template: Mapping[str, Any]) -> str:
    """The group's pod template as a StatefulSet would hold it: one hash for every index of the group. What makes
    one pod of it (its name, hostname and subdomain, its owner) is added after and left out, or every pod would
    differ from the group's hash and a new name would read as a new template."""
    return meta.content_hash(template)


def confine_env(spec: SlurmClusterSpec, *, privileged_jobs: bool) -> list[dict[str, str]]:
    """What the chroot plugin leaves out of a job task's confinement (native/spank_chroot/confine.h), named in
    slurmd's environment, which slurmstepd reads before any task: the pod carries it, so a new setting arrives with
    the new plugin (an older one ignores it) and never reaches a job's own environment. Each variable only when on,
    so the pods of clusters without them stay as they were."""
    env = []
    if privileged_jobs:
        env.append({"name": "SLURMCTL_PRIVILEGED_JOBS", "value": "yes"})
    # crun rootless (containers.enabled) and enroot (pyxis) make a user namespace of their own.
    if spec.containers.enabled or spec.containers.pyxis.enabled:
        env.append({"name": "SLURMCTL_USER_NAMESPACES", "value": "yes"})
    return env


def job_tmp_env(spec: SlurmClusterSpec, group: WorkerGroup) -> list[dict[str, str]]:
    """spec.workers[].jobTmp (else spec.jail.jobTmp's): the size of each job's /tmp and /dev/shm tmpfs in bytes, for
    the chroot plugin (native/spank_chroot/jail.h), beside the directories it mounts them in. A new size is a new
    pod template: the group's workers are re-created one drained node at a time, like any."""
    tmp, shm = spec.job_tmp_sizes(group)
    return [
        {"name": "SLURMCTL_JOB_TMP_SIZE", "value": str(int(parse_quantity(tmp)))},
        {"name": "SLURMCTL_JOB_SHM_SIZE", "value": str(int(parse_quantity(shm)))},
    ]


def _pod_template(
    cluster: SlurmCluster,
    group: WorkerGroup,
    *,
    configs: Mapping[str, str],
    munge_key_id: str,
    cluster_domain: str,
    privileged_jobs: bool,
) -> dict[str, Any]:
    c = meta.cluster_name(cluster)
    spec = cluster.spec
    image = spec.image_for("worker", group.image)
    group_label = {meta.LABEL_WORKER_GROUP: group.name}
    selector = meta.selector(c, COMPONENT, **group_label)
    # A fixed group's slurmd registers as a dynamic node with this definition; an elastic group's nodes are CLOUD
    # nodes of nodes.conf, which slurmd finds under its name (see render/slurm_conf.py).
    registration = (
        {"name": "SLURMD_CLOUD", "value": "true"}
        if group.autoscale is not None
        else {"name": "SLURMD_CONF", "value": dynamic_node_conf(group)}
    )
    shm_size = pods.quantity(spec.shared_memory_size(group))
    # (env, volume, path, emptyDir): the bases of the jobs' /tmp and /dev/shm. Each job's are a tmpfs of their own
    # (job_tmp_env), mounted on the base by the plugin; the emptyDirs hold only those mount points.
    job_dirs: list[tuple[str, str, str, dict[str, str]]] = (
        [
            ("SLURMCTL_JOB_TMP", "job-tmp", JOB_TMP_DIR, {}),
            ("SLURMCTL_JOB_SHM", "job-shm", JOB_SHM_DIR, {"medium": "Memory", "sizeLimit": shm_size}),
        ]
        if spec.jail.private_tmp
        else []
    )
    # spec.login.sshToJobNodes: the login nodes' sshd in this container too (images/scripts/entrypoint-worker), for
    # connections from the addresses of the login nodes' headless Service, by users with a job here.
    ssh = spec.login.ssh_to_job_nodes
    ssh_from = meta.service_domain(cluster, meta.login_headless(c), cluster_domain)
    slurmd = {
        "name": DAEMON_CONTAINER,
        "image": image,
        "env": [
            pods.node_name_env(),
            registration,
            *pods.jail_env(spec),
            pods.restart_keys_env(),
            *({"name": env, "value": path} for env, _, path, _ in job_dirs),
            *(job_tmp_env(spec, group) if job_dirs else []),
            *confine_env(spec, privileged_jobs=privileged_jobs),
            *([{"name": SSH_FROM_ENV, "value": ssh_from}] if ssh else []),
        ],
        "ports": [
            {"name": "slurmd", "containerPort": meta.SLURMD_PORT, "protocol": "TCP"},
            *([{"name": "ssh", "containerPort": meta.SSH_PORT, "protocol": "TCP"}] if ssh else []),
        ],
        # pivot_root, mount namespaces and bind mounts into the jail need the full capability set.
        "securityContext": {"privileged": True},
        "volumeMounts": [
            *pods.slurm_mounts(),
            *pods.jail_mounts(spec),
            {"name": "dev-shm", "mountPath": "/dev/shm"},  # noqa: S108 - the pod's own memory-backed shm
            *({"name": name, "mountPath": path} for _, name, path, _ in job_dirs),
            *(sshd_mounts() if ssh else []),
        ],
        "readinessProbe": pods.slurm_readiness("worker"),
        # A pod that goes drains its node, lets its jobs finish for a bounded while (or sets it DOWN so that Slurm
        # requeues them), then takes it out of Slurm's node list; a re-created pod registers again. The operator
        # drains before it lets a pod go, so its own deletions find the node idle.
        "lifecycle": {"preStop": {"exec": {"command": [WORKER_PRESTOP]}}},
        "resources": pods.resources(
            group.resources, extra_limits={"nvidia.com/gpu": group.gpus} if group.gpus else None
        ),
    }
    shm = {"name": "dev-shm", "emptyDir": {"medium": "Memory", "sizeLimit": shm_size}}
    template = pods.slurm_pod_template(
        c,
        COMPONENT,
        config_hash=config_hash(configs, munge_key_id=munge_key_id),
        daemon=slurmd,
        image=image,
        volumes=[
            *pods.slurm_volumes(c),
            *pods.jail_volumes(spec),
            shm,
            *({"name": name, "emptyDir": source} for _, name, _, source in job_dirs),
            *(sshd_volumes(c) if ssh else []),
        ],
        placement=group,
        image_pull_secrets=spec.slurm.image_pull_secrets,
        grace_seconds=GRACE_SECONDS,
        extra_labels=group_label,
        dns_search=meta.workers_domain(cluster, cluster_domain),
        # One node lost takes as few of the group's nodes as it can; its spec can replace or drop this.
        default_spread=pods.spread_over_nodes(selector),
    )
    add_sssd(cluster, template["spec"])
    return template
