"""The `rest` component: slurmrestd, Slurm's REST API, as a Deployment and the Service `<c>-rest` (port 6820).

slurmrestd authenticates callers by JWT only (`-a rest_auth/jwt`): it passes each request's user name and token on to
slurmctld (and slurmdbd), which verify the token with the cluster's JWT key; slurmrestd itself holds no key and no
munge credential (`SLURM_JWT=daemon` makes it speak auth/jwt to the daemons, so the pod needs no munge sidecar).
It runs as its own unprivileged user (not root, not SlurmUser: slurmrestd refuses SlurmUser) from the first
instruction on, with a read-only root filesystem: it only reads slurm.conf, mounted from the configs ConfigMap
straight at /etc/slurm.

Only the OpenAPI plugins that can work are loaded (`-s`): slurmrestd exits at start when openapi/slurmdbd is loaded
without accounting, so openapi/slurmdbd joins openapi/slurmctld only while accounting is enabled. The data parsers are
Slurm's default (every version 24.11 ships: /slurm/v0.0.40 to v0.0.42), so clients written against an older version
keep working.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from slurmctl.api.v1 import SlurmCluster
from slurmctl.render import meta, pods
from slurmctl.render.slurm_conf import SLURM_CONF_DIR

COMPONENT = "rest"
# The rest image's own user (images/rest/Dockerfile): neither root nor SlurmUser.
SLURMRESTD_UID = 991
OPENAPI_SLURMCTLD = "openapi/slurmctld"
OPENAPI_SLURMDBD = "openapi/slurmdbd"
# The newest API version Slurm 24.11 serves (/slurm/v0.0.42/...), the one clients should use.
API_VERSION = "v0.0.42"
# Readiness: slurmrestd answers its OpenAPI description, which it builds itself from the plugins it loaded, without
# a call to slurmctld. Every path needs a user name and token with rest_auth/jwt; slurmrestd only passes tokens on (it
# cannot verify them), so a placeholder pair is enough here and reaches no daemon. Whether slurmctld answers is the
# controller's readiness, not slurmrestd's: a caller still gets slurmrestd's own error then.
PROBE_PATH = "/openapi/v3"
PROBE_HEADERS = (("X-SLURM-USER-NAME", "slurmctl-probe"), ("X-SLURM-USER-TOKEN", "none"))


def openapi_plugins(cluster: SlurmCluster) -> list[str]:
    if cluster.spec.accounting.enabled:
        return [OPENAPI_SLURMCTLD, OPENAPI_SLURMDBD]
    return [OPENAPI_SLURMCTLD]


def slurmrestd_args(cluster: SlurmCluster) -> list[str]:
    return ["-a", "rest_auth/jwt", "-s", ",".join(openapi_plugins(cluster)), f"0.0.0.0:{meta.SLURMRESTD_PORT}"]


def config_hash(configs: Mapping[str, str]) -> str:
    """slurmrestd reads slurm.conf (and the nodes.conf it includes) once at start."""
    return meta.content_hash(dict(configs))


def render_rest_service(cluster: SlurmCluster) -> dict[str, Any]:
    c = meta.cluster_name(cluster)
    return meta.service(cluster, meta.rest(c), COMPONENT, port_name="http", port=meta.SLURMRESTD_PORT)


# How long slurmrestd stays bound to a node that stopped answering before it is evicted and started elsewhere: the
# operator asks Slurm nothing meanwhile (it fails closed), so a lost node's workers wait for it.
LOST_NODE_SECONDS = 30


def render_rest_deployment(cluster: SlurmCluster, *, configs: Mapping[str, str]) -> dict[str, Any]:
    c = meta.cluster_name(cluster)
    rest = cluster.spec.rest
    image = cluster.spec.image_for("rest", rest.image)
    slurmrestd = {
        "name": "slurmrestd",
        "image": image,
        "args": slurmrestd_args(cluster),
        "env": [
            {"name": "SLURM_JWT", "value": "daemon"},
            # slurmrestd unshares its SysV semaphores and file table at start; the runtime's default seccomp filter
            # refuses unshare(2) to a container without CAP_SYS_ADMIN, and the pod already isolates both.
            {"name": "SLURMRESTD_SECURITY", "value": "disable_unshare_sysv,disable_unshare_files"},
        ],
        "ports": [{"name": "http", "containerPort": meta.SLURMRESTD_PORT, "protocol": "TCP"}],
        "volumeMounts": [{"name": "slurm-configs", "mountPath": SLURM_CONF_DIR, "readOnly": True}],
        "readinessProbe": {
            "httpGet": {
                "path": PROBE_PATH,
                "port": "http",
                "httpHeaders": [{"name": name, "value": value} for name, value in PROBE_HEADERS],
            },
            "periodSeconds": 10,
            "timeoutSeconds": 5,
            "failureThreshold": 3,
        },
        "resources": pods.resources(rest.resources),
        "securityContext": {
            "runAsUser": SLURMRESTD_UID,
            "runAsGroup": SLURMRESTD_UID,
            "runAsNonRoot": True,
            "allowPrivilegeEscalation": False,
            "readOnlyRootFilesystem": True,
            "capabilities": {"drop": ["ALL"]},
            "seccompProfile": {"type": "RuntimeDefault"},
        },
    }
    template_spec: dict[str, Any] = {
        "automountServiceAccountToken": False,
        "containers": [slurmrestd],
        "volumes": [{"name": "slurm-configs", "configMap": {"name": meta.slurm_configs(c)}}],
        # Stateless, and the cluster's only way in for the operator: on a node that stopped answering it is
        # evicted after LOST_NODE_SECONDS (not the API server's 300 s), and the Deployment starts it elsewhere.
        **pods.scheduling(rest, default_tolerations=pods.leave_lost_nodes(LOST_NODE_SECONDS)),
    }
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": meta.object_meta(cluster, meta.rest(c), COMPONENT),
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": meta.selector(c, COMPONENT)},
            "template": {
                "metadata": {
                    "labels": meta.labels(c, COMPONENT),
                    "annotations": {meta.CONFIG_HASH_ANNOTATION: config_hash(configs)},
                },
                "spec": template_spec,
            },
        },
    }


def render_rest(cluster: SlurmCluster, *, configs: Mapping[str, str]) -> list[dict[str, Any]]:
    return [render_rest_service(cluster), render_rest_deployment(cluster, configs=configs)]
