"""Objects the `controller` component owns: slurmctld's StatefulSet and its headless Service.

With an elastic group, slurmctld's pods run as the cluster's `<c>-power` ServiceAccount and project its token, which
only Slurm's ResumeProgram uses, to patch one ConfigMap (render/power.py): the one exception to "no Slurm process talks
to the Kubernetes API" (docs/security.md)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from slurmctl.api.v1 import SlurmCluster
from slurmctl.render import meta, pods, power
from slurmctl.render.slurm_conf import JAIL_PATH, restart_settings
from slurmctl.render.sssd import add_sssd

COMPONENT = "controller"
STATE_DIR = "/var/spool/slurmctld"
# slurmctld saves all its state on SIGTERM (every job it accepted, the nodes, reservations): a large cluster's state on
# a slow volume takes seconds. The kubelet kills it only after this.
GRACE_SECONDS = 120


def config_hash(configs: Mapping[str, str], *, munge_key_id: str, jwt_key_id: str) -> str:
    """slurmctld takes every other config change in place (`scontrol reconfigure`, run by the container when the
    ConfigMap changes), so only what reconfigure cannot change, or a new key, restarts it. `configs` is the rendered
    config set (`render_slurm_configs`), rendered once per reconcile."""
    return meta.content_hash(restart_settings(configs), munge_key_id, jwt_key_id)


def render_controller_service(cluster: SlurmCluster) -> dict[str, Any]:
    """Headless, so `<c>-controller-0.<c>-controller` (SlurmctldHost) resolves as soon as the pod runs."""
    c = meta.cluster_name(cluster)
    return meta.service(
        cluster, meta.controller(c), COMPONENT, port_name="slurmctld", port=meta.SLURMCTLD_PORT, headless=True
    )


def _statefulset(
    cluster: SlurmCluster,
    *,
    configs: Mapping[str, str],
    munge_key_id: str,
    jwt_key_id: str,
    backup: bool,
    cluster_domain: str,
) -> dict[str, Any]:
    c = meta.cluster_name(cluster)
    spec = cluster.spec
    ctl = spec.controller
    image = spec.image_for("controller", ctl.image)
    env: list[dict[str, Any]] = [{"name": "JAIL_DIR", "value": JAIL_PATH}, pods.restart_keys_env()]
    if backup:
        env.append({"name": "SLURMCTLD_STANDBY", "value": "true"})
    mounts = [
        *pods.slurm_mounts(),
        *pods.jail_mounts(spec, read_only=True),
        pods.jwt_key_mount(),
        {"name": "state", "mountPath": STATE_DIR},
    ]
    volumes = [*pods.slurm_volumes(c), pods.volume("jail", spec.jail.volume), pods.jwt_key_volume(c)]
    if spec.elastic_groups:
        env.append(power.configmap_env(c))
        mounts.append(power.token_mount())
        volumes.append(power.token_volume())
    security = pods.root_then_drop()
    if spec.elastic_groups:
        # SlurmUser runs ResumeProgram, which reads the power token. The kubelet writes a projected token 0600, owned
        # by the containers' user, when every container of the pod names the same runAsUser (root here); with none
        # named on this one (the image's user: root) it keeps the volume's mode (power.token_volume).
        del security["runAsUser"]
    slurmctld = {
        "name": "slurmctld",
        "image": image,
        "ports": [{"name": "slurmctld", "containerPort": meta.SLURMCTLD_PORT, "protocol": "TCP"}],
        # The jail, read-only, for its users: slurmctld resolves each job's user and groups itself (Slurm >= 23.11
        # sends them to the nodes), and the users live in the jail's /etc/passwd.
        "env": env,
        "volumeMounts": mounts,
        "readinessProbe": pods.slurm_readiness("controller"),
        "resources": pods.resources(ctl.resources),
        # Root for the entrypoint (configs, munge and JWT keys, the state directory's owner), then slurmctld as
        # SlurmUser.
        "securityContext": security,
    }
    # Apart from the login pods when the cluster has nodes enough (render/login.py wants the same), and from the
    # other slurmctld: a lost node then takes one controller, not both.
    apart = [(pods.APART_WEIGHT, meta.selector(c, "login"))]
    if ctl.standby:
        other = f"{meta.controller(c)}-0" if backup else f"{meta.controller_backup(c)}-0"
        apart.append((pods.APART_WEIGHT, {meta.STATEFULSET_POD_NAME_LABEL: other}))
    name = meta.controller_backup(c) if backup else meta.controller(c)
    extra_labels = {meta.LABEL_CONTROLLER_ROLE: "backup"} if backup else None
    template = pods.slurm_pod_template(
        c,
        COMPONENT,
        config_hash=config_hash(configs, munge_key_id=munge_key_id, jwt_key_id=jwt_key_id),
        daemon=slurmctld,
        image=image,
        volumes=volumes,
        placement=ctl,
        image_pull_secrets=spec.slurm.image_pull_secrets,
        grace_seconds=GRACE_SECONDS,
        extra_labels=extra_labels,
        dns_search=meta.workers_domain(cluster, cluster_domain),
        default_anti_affinity=pods.avoid_nodes_of(*apart),
    )
    if spec.elastic_groups:
        template["spec"]["serviceAccountName"] = power.power_name(c)
    sts_spec: dict[str, Any] = {
        "replicas": ctl.size,
        "serviceName": meta.controller(c),
        "selector": {"matchLabels": meta.selector(c, COMPONENT, **(extra_labels or {}))},
        "template": template,
    }
    add_sssd(cluster, sts_spec["template"]["spec"])
    if backup:
        # The primary's own claim, by name: Slurm's backup controller works on the primary's StateSaveLocation
        # (slurm.conf(5): "readable and writable by both systems"), and a cluster that turns the standby on keeps its
        # state where it always was.
        volumes.append({"name": "state", "persistentVolumeClaim": {"claimName": meta.controller_state_claim(c)}})
    else:
        claim: dict[str, Any] = {
            "metadata": {"name": "state", "labels": meta.labels(c, COMPONENT)},
            "spec": {
                "accessModes": [ctl.state_volume.access_mode],
                "resources": {"requests": {"storage": pods.quantity(ctl.state_volume.size)}},
            },
        }
        if ctl.state_volume.storage_class_name:
            claim["spec"]["storageClassName"] = ctl.state_volume.storage_class_name
        sts_spec["volumeClaimTemplates"] = [claim]
    return {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": meta.object_meta(cluster, name, COMPONENT, extra_labels=extra_labels),
        "spec": sts_spec,
    }


def render_controller_statefulset(
    cluster: SlurmCluster,
    *,
    configs: Mapping[str, str],
    munge_key_id: str,
    jwt_key_id: str,
    cluster_domain: str = meta.DEFAULT_CLUSTER_DOMAIN,
) -> dict[str, Any]:
    """The primary slurmctld: pod `<c>-controller-0`, the first SlurmctldHost, and the claim of its state."""
    return _statefulset(
        cluster,
        configs=configs,
        munge_key_id=munge_key_id,
        jwt_key_id=jwt_key_id,
        backup=False,
        cluster_domain=cluster_domain,
    )


def render_controller_backup_statefulset(
    cluster: SlurmCluster,
    *,
    configs: Mapping[str, str],
    munge_key_id: str,
    jwt_key_id: str,
    cluster_domain: str = meta.DEFAULT_CLUSTER_DOMAIN,
) -> dict[str, Any]:
    """The standby slurmctld (spec.controller.standby): pod `<c>-controller-backup-0`, the second SlurmctldHost, on
    the primary's state claim. A StatefulSet of its own rather than a second replica: a replica would get a claim of
    its own from the claim template, and the primary's StatefulSet, its claim template and its claim (where an
    existing cluster's state is) stay as they are."""
    return _statefulset(
        cluster,
        configs=configs,
        munge_key_id=munge_key_id,
        jwt_key_id=jwt_key_id,
        backup=True,
        cluster_domain=cluster_domain,
    )


def controller_statefulset_names(cluster: SlurmCluster) -> list[str]:
    c = meta.cluster_name(cluster)
    return [meta.controller(c), *([meta.controller_backup(c)] if cluster.spec.controller.standby else [])]


def render_controller(
    cluster: SlurmCluster,
    *,
    configs: Mapping[str, str],
    munge_key_id: str,
    jwt_key_id: str,
    cluster_domain: str = meta.DEFAULT_CLUSTER_DOMAIN,
) -> list[dict[str, Any]]:
    renderers = [render_controller_statefulset]
    if cluster.spec.controller.standby:
        renderers.append(render_controller_backup_statefulset)
    return [
        render_controller_service(cluster),
        *(
            render(
                cluster,
                configs=configs,
                munge_key_id=munge_key_id,
                jwt_key_id=jwt_key_id,
                cluster_domain=cluster_domain,
            )
            for render in renderers
        ),
    ]
