"""Objects the `login` component owns: the sshd ConfigMap, the login Services and the login StatefulSet."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from slurmctl.api.v1 import SlurmCluster
from slurmctl.render import meta, pods
from slurmctl.render.sshd import (
    AUTHORIZED_KEYS,
    DEFAULT_HOST_KEY_TYPES,
    SSHD_CONFIG,
    render_authorized_keys,
    render_sshd_config,
    sshd_mounts,
    sshd_volumes,
)
from slurmctl.render.sssd import add_sssd

COMPONENT = "login"
# The host name patterns of the workers whose sshd (spec.login.sshToJobNodes) shares the login nodes' host keys.
JOB_NODES_ENV = "SLURMCTL_JOB_NODES"
# sshd ends on SIGTERM at once; its sessions (and any srun in them) end with the pod.
GRACE_SECONDS = 30
# sshd and complement-jail as root, not privileged: no device of the node in /dev (sessions see the container's minimal
# /dev through the jail), /sys read-only, the runtime's seccomp filter. What each capability is for: SYS_ADMIN
# complement-jail's bind mounts and fresh /proc, and nothing after: sshd, so every session, runs without it
# (entrypoint-login drops it from their bounding set: a root session can neither mount nor, under the runtime's seccomp
# filter, make a namespace); SETPCAP that drop, and itself dropped with it; SYS_CHROOT ChrootDirectory and sshd's
# privilege separation; SETUID, SETGID a session's user; CHOWN, FOWNER, DAC_OVERRIDE installing keys and configs, the
# session's pty; NET_BIND_SERVICE port 22; AUDIT_WRITE sshd's login records (a failed write ends the session); KILL
# tini's forwarding of the kubelet's SIGTERM. allowPrivilegeEscalation stays unset (Kubernetes refuses it off beside
# SYS_ADMIN): complement-jail mounts the jail nosuid, so no program in it gains privileges, setuid or not.
LOGIN_CAPABILITIES = (
    "AUDIT_WRITE",
    "CHOWN",
    "DAC_OVERRIDE",
    "FOWNER",
    "KILL",
    "NET_BIND_SERVICE",
    "SETGID",
    "SETPCAP",
    "SETUID",
    "SYS_ADMIN",
    "SYS_CHROOT",
)
# A node's AppArmor (Ubuntu's) would refuse complement-jail's mounts under the runtime's default profile: the
# annotation, not the securityContext field, because API servers before 1.30 know only the annotation.
APPARMOR_UNCONFINED = {"container.apparmor.security.beta.kubernetes.io/sshd": "unconfined"}


def sshd_configs_data(cluster: SlurmCluster, *, host_keys: Iterable[str] = DEFAULT_HOST_KEY_TYPES) -> dict[str, str]:
    return {
        SSHD_CONFIG: render_sshd_config(cluster, host_keys=host_keys),
        AUTHORIZED_KEYS: render_authorized_keys(cluster),
    }


def config_hash(
    cluster: SlurmCluster,
    *,
    munge_key_id: str,
    host_keys_id: str,
    host_keys: Iterable[str] = DEFAULT_HOST_KEY_TYPES,
) -> str:
    """No Slurm setting rolls the login pods: users' commands there read slurm.conf afresh each time, and the
    container installs every change at once (a restart would end users' sessions and the sruns in them)."""
    return meta.content_hash(
        sshd_configs_data(cluster, host_keys=host_keys),
        munge_key_id,
        host_keys_id,
    )


def render_sshd_configmap(
    cluster: SlurmCluster, *, host_keys: Iterable[str] = DEFAULT_HOST_KEY_TYPES
) -> dict[str, Any]:
    c = meta.cluster_name(cluster)
    return meta.configmap(cluster, meta.sshd_configs(c), COMPONENT, sshd_configs_data(cluster, host_keys=host_keys))


def render_login_service(cluster: SlurmCluster) -> dict[str, Any]:
    c = meta.cluster_name(cluster)
    svc = cluster.spec.login.service
    port: dict[str, Any] = {"name": "ssh", "port": svc.port, "targetPort": meta.SSH_PORT, "protocol": "TCP"}
    spec: dict[str, Any] = {"type": svc.type, "selector": meta.selector(c, COMPONENT), "ports": [port]}
    if svc.type != "ClusterIP" and svc.node_port is not None:
        port["nodePort"] = svc.node_port
    if svc.type == "LoadBalancer":
        if svc.load_balancer_ip:
            spec["loadBalancerIP"] = svc.load_balancer_ip
        if svc.load_balancer_source_ranges:
            spec["loadBalancerSourceRanges"] = list(svc.load_balancer_source_ranges)
    metadata = meta.object_meta(cluster, meta.login(c), COMPONENT)
    if svc.annotations:
        metadata["annotations"] = dict(svc.annotations)
    return {"apiVersion": "v1", "kind": "Service", "metadata": metadata, "spec": spec}


def render_login_headless_service(cluster: SlurmCluster) -> dict[str, Any]:
    c = meta.cluster_name(cluster)
    return meta.service(cluster, meta.login_headless(c), COMPONENT, port_name="ssh", port=meta.SSH_PORT, headless=True)


def render_login_pod_services(cluster: SlurmCluster) -> list[dict[str, Any]]:
    """One headless Service per login pod, named as the pod: its short name (`<c>-login-0`, which is what srun on it
    calls its host) then resolves from every pod of the namespace. slurmctld reaches a step's srun by that name
    (cancel, signal, step completion); unresolvable, each such call held slurmctld for 10 s of retries, `scancel`
    timed out, and steps waiting on slurmctld ended as "Kill task failed" drains."""
    c = meta.cluster_name(cluster)
    names = (meta.login_pod(c, i) for i in range(cluster.spec.login.size))
    return [
        meta.service(cluster, name, COMPONENT, port_name="ssh", port=meta.SSH_PORT, headless=True, pod=name)
        for name in names
    ]


def render_login_statefulset(
    cluster: SlurmCluster,
    *,
    munge_key_id: str,
    host_keys_id: str,
    host_keys: Iterable[str] = DEFAULT_HOST_KEY_TYPES,
    cluster_domain: str = meta.DEFAULT_CLUSTER_DOMAIN,
) -> dict[str, Any]:
    c = meta.cluster_name(cluster)
    spec = cluster.spec
    login = spec.login
    image = spec.image_for("login", login.image)
    # spec.login.sshToJobNodes: the workers' sshd has these host keys too, so the login container writes them into the
    # known hosts of the jail's ssh client for the workers' names (images/scripts/entrypoint-login). One pattern for
    # every group (`<c>-worker-*`), not one per group: the pod template must not change when a group is added or
    # removed, or every login pod would restart and end its users' sessions.
    job_nodes = [f"{meta.worker_group(c, '')}*"] if login.ssh_to_job_nodes else []
    sshd = {
        "name": "sshd",
        "image": image,
        "env": [*pods.jail_env(spec), *([{"name": JOB_NODES_ENV, "value": ",".join(job_nodes)}] if job_nodes else [])],
        "ports": [{"name": "ssh", "containerPort": meta.SSH_PORT, "protocol": "TCP"}],
        "securityContext": {
            "runAsUser": 0,
            "capabilities": {"drop": ["ALL"], "add": list(LOGIN_CAPABILITIES)},
            "seccompProfile": {"type": "RuntimeDefault"},
        },
        "volumeMounts": [
            # No munge key: the clients need only munged's socket, and a root session that leaves the chroot (root
            # logins, an admin's opt-in) must find no key that speaks for every user to Slurm.
            *pods.slurm_mounts(munge_key=False),
            *pods.jail_mounts(spec),
            *sshd_mounts(),
        ],
        "readinessProbe": pods.slurm_readiness("login"),
        "resources": pods.resources(login.resources),
    }
    volumes = [
        *pods.slurm_volumes(c),
        *pods.jail_volumes(spec),
        *sshd_volumes(c),
    ]
    hash_ = config_hash(cluster, munge_key_id=munge_key_id, host_keys_id=host_keys_id, host_keys=host_keys)
    template = pods.slurm_pod_template(
        c,
        COMPONENT,
        config_hash=hash_,
        daemon=sshd,
        image=image,
        volumes=volumes,
        placement=login,
        image_pull_secrets=spec.slurm.image_pull_secrets,
        grace_seconds=GRACE_SECONDS,
        dns_search=meta.workers_domain(cluster, cluster_domain),
        # Apart from slurmctld (render/controller.py wants the same) and, less strongly, from each other.
        default_anti_affinity=pods.avoid_nodes_of(
            (pods.APART_WEIGHT, meta.selector(c, "controller")),
            (pods.SPREAD_WEIGHT, meta.selector(c, COMPONENT)),
        ),
    )
    template["metadata"]["annotations"] |= APPARMOR_UNCONFINED
    add_sssd(cluster, template["spec"])
    return {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": meta.object_meta(cluster, meta.login(c), COMPONENT),
        "spec": {
            "replicas": login.size,
            "serviceName": meta.login_headless(c),
            "podManagementPolicy": "Parallel",
            "selector": {"matchLabels": meta.selector(c, COMPONENT)},
            "template": template,
        },
    }


def render_login(
    cluster: SlurmCluster,
    *,
    munge_key_id: str,
    host_keys_id: str,
    host_keys: Iterable[str] = DEFAULT_HOST_KEY_TYPES,
    cluster_domain: str = meta.DEFAULT_CLUSTER_DOMAIN,
) -> list[dict[str, Any]]:
    """`host_keys`: the key types the cluster's host keys Secret holds (its sshd_config names those)."""
    ids = {"munge_key_id": munge_key_id, "host_keys_id": host_keys_id}
    return [
        render_sshd_configmap(cluster, host_keys=host_keys),
        render_login_service(cluster),
        render_login_headless_service(cluster),
        *render_login_pod_services(cluster),
        render_login_statefulset(cluster, host_keys=host_keys, cluster_domain=cluster_domain, **ids),
    ]
