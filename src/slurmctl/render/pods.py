"""Pod pieces every Slurm workload shares: config and munge volumes, the munge sidecar, jail mounts, scheduling.

Paths match the entrypoints in images/scripts (lib.sh): configs at /mnt/slurm-configs, the munge key at
/mnt/munge-key/munge.key, the munge socket directory /run/munge, the jail at /mnt/jail and its sub-mounts under
/mnt/jail-submounts/<name>.

Every pod slurmctl renders sets `automountServiceAccountToken: false`: no Slurm process talks to the Kubernetes API,
and a token mounted under /run would be one bind mount away from users' jobs inside the jail. One deliberate, narrow
exception: with an elastic group, the controller pods (slurmctld, where no user runs anything) project the token of
the cluster's `<c>-power` ServiceAccount for Slurm's ResumeProgram, which may patch one ConfigMap and do nothing else
(render/power.py, docs/security.md).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from slurmctl.api.v1 import LocalObjectReference, ResourceRequirements, Scheduling, SlurmClusterSpec, VolumeRef
from slurmctl.render import meta
from slurmctl.render.slurm_conf import JAIL_PATH, RESTART_KEY_NAMES

SLURM_CONFIGS_MOUNT = "/mnt/slurm-configs"
MUNGE_KEY_MOUNT = "/mnt/munge-key"
JWT_KEY_MOUNT = "/mnt/jwt-key"
MUNGE_SOCKET_DIR = "/run/munge"
MUNGE_SOCKET = f"{MUNGE_SOCKET_DIR}/munge.socket.2"
SUBMOUNTS_ROOT = "/mnt/jail-submounts"
ENTRYPOINT_MUNGE = "/usr/lib/slurmctl/entrypoint-munge"
SLURM_READY = "/usr/lib/slurmctl/slurm-ready"
# How long munged may take to open its socket before the kubelet restarts its container (the daemon's container
# starts only after that).
MUNGE_START_SECONDS = 120
# The node label every kubelet sets: topology "one node" for spreading and anti-affinity.
HOSTNAME_TOPOLOGY_KEY = "kubernetes.io/hostname"
# Weights (1 to 100) of the soft anti-affinities: keeping the controller and login pods apart (a node lost takes
# only one of them; users' logins compete with slurmctld for no node's CPU and memory) counts more than spreading
# login pods among themselves.
APART_WEIGHT = 100
SPREAD_WEIGHT = 50
MUNGE_RESOURCES = {"requests": {"cpu": "50m", "memory": "64Mi"}, "limits": {"memory": "256Mi"}}


def volume(name: str, ref: VolumeRef) -> dict[str, Any]:
    if ref.claim_name:
        return {"name": name, "persistentVolumeClaim": {"claimName": ref.claim_name}}
    return {"name": name, **(ref.source or {})}


def slurm_volumes(c: str) -> list[dict[str, Any]]:
    """Configs, munge key and the munge socket directory shared between the daemon and its munge sidecar."""
    return [
        {"name": "slurm-configs", "configMap": {"name": meta.slurm_configs(c)}},
        {
            "name": "munge-key",
            "secret": {"secretName": meta.munge_secret(c), "defaultMode": 0o400},
        },
        {"name": "munge-socket", "emptyDir": {}},
    ]


def slurm_mounts(*, munge_key: bool = True) -> list[dict[str, Any]]:
    """The daemon container's: configs, the munge socket and (unless `munge_key` is off: slurmdbd uses munge only
    through the socket) the munge key."""
    key = [{"name": "munge-key", "mountPath": MUNGE_KEY_MOUNT, "readOnly": True}] if munge_key else []
    return [
        {"name": "slurm-configs", "mountPath": SLURM_CONFIGS_MOUNT, "readOnly": True},
        *key,
        {"name": "munge-socket", "mountPath": MUNGE_SOCKET_DIR},
    ]


def jwt_key_volume(c: str) -> dict[str, Any]:
    """The JWT key Secret, for the daemons that verify users' tokens (slurmctld, slurmdbd); their entrypoints copy it
    to the path slurm.conf / slurmdbd.conf name, owned by SlurmUser."""
    return {"name": "jwt-key", "secret": {"secretName": meta.jwt_key_secret(c), "defaultMode": 0o400}}


def jwt_key_mount() -> dict[str, Any]:
    return {"name": "jwt-key", "mountPath": JWT_KEY_MOUNT, "readOnly": True}


# Containers whose entrypoint starts as root to install keys and configs with the right owner and mode (`install -o`,
# `chown`, `chmod` of what it no longer owns, writing into /etc/munge which munge owns), then execs the daemon with
# `setpriv --reuid/--regid --init-groups` as its own user (munge, SlurmUser). setpriv from root to another user
# clears every capability, so the daemon runs with none; the root part keeps only what those steps use, and tini (PID
# 1, root) keeps KILL: it passes the kubelet's SIGTERM on to the daemon, which runs as another user. Without KILL the
# kernel refuses that signal, tini exits ("Unexpected error when forwarding signal") and the daemon is killed without
# its shutdown: slurmctld then forgets the jobs it accepted since its last save. No privilege escalation (nothing
# here execs a setuid binary or needs file capabilities) and the runtime's default seccomp filter.
ROOT_THEN_DROP_CAPABILITIES = ("CHOWN", "DAC_OVERRIDE", "FOWNER", "KILL", "SETGID", "SETUID")


def root_with(capabilities: Sequence[str]) -> dict[str, Any]:
    """The securityContext of a container that runs as root with only `capabilities` (every other one dropped), no
    privilege escalation and the runtime's default seccomp filter."""
    return {
        "runAsUser": 0,
        "allowPrivilegeEscalation": False,
        "capabilities": {"drop": ["ALL"], "add": list(capabilities)},
        "seccompProfile": {"type": "RuntimeDefault"},
    }


def root_then_drop() -> dict[str, Any]:
    """The securityContext of a container that starts as root and drops to a daemon user (see above)."""
    return root_with(ROOT_THEN_DROP_CAPABILITIES)


def munge_container(image: str, *, security_context: dict[str, Any] | None = None) -> dict[str, Any]:
    """munged as a native sidecar (an init container with `restartPolicy: Always`): the kubelet starts it before the
    daemon's container, and starts that one only once munged's socket exists (its startup probe); when the pod
    stops, the kubelet stops the sidecar only after every regular container has exited. So munged outlives the
    daemon it serves by design: a worker's preStop leaves Slurm's node list with munge-signed messages, slurmctld
    sends messages while it saves its state, and neither needs a handshake with munge to keep it up meanwhile.
    `security_context`: the container's own, where the pod runs without root (render/accounting.py)."""
    return {
        "name": "munge",
        "image": image,
        "command": [ENTRYPOINT_MUNGE],
        "restartPolicy": "Always",
        "startupProbe": {
            "exec": {"command": ["test", "-S", MUNGE_SOCKET]},
            "periodSeconds": 1,
            "failureThreshold": MUNGE_START_SECONDS,
        },
        "volumeMounts": [
            {"name": "munge-key", "mountPath": MUNGE_KEY_MOUNT, "readOnly": True},
            {"name": "munge-socket", "mountPath": MUNGE_SOCKET_DIR},
        ],
        "resources": MUNGE_RESOURCES,
        "securityContext": security_context or root_then_drop(),
    }


def jail_volumes(spec: SlurmClusterSpec) -> list[dict[str, Any]]:
    vols = [volume("jail", spec.jail.volume)]
    vols += [volume(f"submount-{m.name}", m.volume) for m in sorted(spec.jail.sub_mounts, key=lambda m: m.name)]
    return vols


def jail_mounts(spec: SlurmClusterSpec, *, read_only: bool = False) -> list[dict[str, Any]]:
    mounts: list[dict[str, Any]] = [{"name": "jail", "mountPath": JAIL_PATH}]
    if read_only:
        return [{**mounts[0], "readOnly": True}]
    for m in sorted(spec.jail.sub_mounts, key=lambda m: m.name):
        mount: dict[str, Any] = {"name": f"submount-{m.name}", "mountPath": f"{SUBMOUNTS_ROOT}/{m.name}"}
        if m.read_only:
            mount["readOnly"] = True
        mounts.append(mount)
    return mounts


def jail_env(spec: SlurmClusterSpec) -> list[dict[str, Any]]:
    """complement-jail re-binds each sub-mount from /mnt/jail-submounts/<name> to its path inside the jail, nosuid and
    nodev unless named in JAIL_SUBMOUNTS_SETUID (set only when one is, so other clusters' pod templates stay as
    they were)."""
    mounts = sorted(spec.jail.sub_mounts, key=lambda m: m.name)
    pairs = " ".join(f"{m.name}:{m.mount_path}" for m in mounts)
    env = [{"name": "JAIL_DIR", "value": JAIL_PATH}, {"name": "JAIL_SUBMOUNTS", "value": pairs}]
    if setuid := " ".join(m.name for m in mounts if m.allow_setuid):
        env.append({"name": "JAIL_SUBMOUNTS_SETUID", "value": setuid})
    return env


def quantity(value: int | str) -> str:
    """Quantities as strings: server-side apply on older API servers rejects a bare number where a quantity goes."""
    return str(value)


def resources(req: ResourceRequirements, *, extra_limits: dict[str, int] | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if req.requests:
        out["requests"] = {k: quantity(v) for k, v in req.requests.items()}
    limits = {**req.limits, **(extra_limits or {})}
    if limits:
        out["limits"] = {k: quantity(v) for k, v in limits.items()}
    return out


def spread_over_nodes(selector: dict[str, str]) -> list[dict[str, Any]]:
    """A soft spread of the pods `selector` matches over nodes: the scheduler prefers the node where fewest of them
    run, and still places a pod when every node already has one (ScheduleAnyway)."""
    return [
        {
            "maxSkew": 1,
            "topologyKey": HOSTNAME_TOPOLOGY_KEY,
            "whenUnsatisfiable": "ScheduleAnyway",
            "labelSelector": {"matchLabels": dict(selector)},
        }
    ]


def avoid_nodes_of(*selectors: tuple[int, dict[str, str]]) -> dict[str, Any]:
    """A soft podAntiAffinity: prefer nodes that run no pod of each (weight, selector), the pod's own namespace."""
    return {
        "preferredDuringSchedulingIgnoredDuringExecution": [
            {
                "weight": weight,
                "podAffinityTerm": {
                    "topologyKey": HOSTNAME_TOPOLOGY_KEY,
                    "labelSelector": {"matchLabels": dict(selector)},
                },
            }
            for weight, selector in selectors
        ]
    }


# The taints the node lifecycle controller puts on a node that stops answering (NoExecute: its pods are evicted once
# their toleration of them runs out; without one of ours, the API server's default is 300 s).
LOST_NODE_TAINTS = ("node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable")


def leave_lost_nodes(seconds: int) -> list[dict[str, Any]]:
    """Tolerations that have a pod evicted `seconds` after its node stopped answering: for stateless pods
    (slurmrestd) whose controller starts a replacement elsewhere as soon as the pod is terminating."""
    return [
        {"key": key, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": seconds}
        for key in LOST_NODE_TAINTS
    ]


def pod_settings(
    s: Scheduling,
    image_pull_secrets: Sequence[LocalObjectReference],
    *,
    default_spread: list[dict[str, Any]] | None = None,
    default_anti_affinity: dict[str, Any] | None = None,
    default_tolerations: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """The Pod spec fields the user sets for a component: placement (plus the component's defaults where the user
    left them out), priority, and the cluster's image pull secrets (spec.slurm.imagePullSecrets: one registry serves
    every image, so they are the same for every pod).

    `default_spread` is used while `topologySpreadConstraints` is absent (`[]` is the user's choice of none).
    `default_anti_affinity` becomes the affinity's podAntiAffinity unless the user's affinity has one: their node
    and pod affinity are kept either way, and their podAntiAffinity (even `{}`) is used as given, ours dropped.
    `default_tolerations` are added for the taint keys none of the user's tolerations names."""
    out: dict[str, Any] = {}
    if s.node_selector:
        out["nodeSelector"] = dict(s.node_selector)
    theirs = {t.get("key") for t in s.tolerations or ()}
    tolerations = [*(s.tolerations or ()), *(t for t in default_tolerations or () if t["key"] not in theirs)]
    if tolerations:
        out["tolerations"] = tolerations
    affinity = dict(s.affinity or {})
    if default_anti_affinity and "podAntiAffinity" not in affinity:
        affinity["podAntiAffinity"] = default_anti_affinity
    if affinity:
        out["affinity"] = affinity
    spread = default_spread if s.topology_spread_constraints is None else s.topology_spread_constraints
    if spread:
        out["topologySpreadConstraints"] = list(spread)
    if s.priority_class_name:
        out["priorityClassName"] = s.priority_class_name
    if image_pull_secrets:
        out["imagePullSecrets"] = [{"name": ref.name} for ref in image_pull_secrets]
    return out


def pod_metadata(s: Scheduling, labels: dict[str, str], annotations: dict[str, str] | None = None) -> dict[str, Any]:
    """A pod template's metadata: the component's podLabels and podAnnotations, and the operator's own, which they
    cannot name (api/v1 refuses those keys), so neither hides the other."""
    out: dict[str, Any] = {"labels": {**s.pod_labels, **labels}}
    if merged := {**s.pod_annotations, **(annotations or {})}:
        out["annotations"] = merged
    return out


def slurm_readiness(role: str) -> dict[str, Any]:
    """Ready means Slurm says so (images/scripts/slurm-ready asks slurmctld), not that a port is open: a slurmd
    that listens but never registered, or a login node that cannot reach slurmctld, is not ready. The timeout
    covers one slurmctld round trip with Slurm's own message timeout."""
    return {
        "exec": {"command": [SLURM_READY, role]},
        "periodSeconds": 10,
        "timeoutSeconds": 15,
        "failureThreshold": 3,
    }


def restart_keys_env() -> dict[str, Any]:
    """For the daemons the operator re-creates for a restart-requiring change (slurmctld, slurmd): their containers
    do not install such a change into the running daemon (images/scripts/lib.sh follow_slurm_configs), which keeps
    the configs it started with, consistent with its jobs, until its pod is re-created."""
    return {"name": "SLURMCTL_RESTART_KEYS", "value": ",".join(RESTART_KEY_NAMES)}


def node_name_env() -> dict[str, Any]:
    return {"name": "SLURMD_NODENAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}


def slurm_pod_template(
    c: str,
    component: str,
    *,
    config_hash: str,
    daemon: dict[str, Any],
    image: str,
    volumes: list[dict[str, Any]],
    placement: Scheduling,
    image_pull_secrets: Sequence[LocalObjectReference],
    grace_seconds: int,
    pod_security_context: dict[str, Any] | None = None,
    munge_security_context: dict[str, Any] | None = None,
    extra_labels: dict[str, str] | None = None,
    hostname: str | None = None,
    dns_search: str | None = None,
    default_spread: list[dict[str, Any]] | None = None,
    default_anti_affinity: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The pod template of a Slurm daemon: its container plus the munge sidecar, the config hash that rolls it, and
    no service-account token (nothing in these pods talks to Kubernetes, and the jail must not expose one).
    `grace_seconds` is how long the daemon has between its SIGTERM and the kubelet's SIGKILL: sized for what it does
    when it stops (its preStop, saving its state); munged stops after it (see munge_container).
    `pod_security_context` and `munge_security_context`: for a pod that runs without root (render/accounting.py);
    the others' containers each say how they start as root and drop to their user. `default_spread` and
    `default_anti_affinity`: the component's placement defaults (see `scheduling`). `dns_search`: a domain the
    pod's resolver searches after the namespace's own (meta.workers_domain); jobs see it too, since the jail gets the
    pod's /etc/resolv.conf."""
    spec: dict[str, Any] = {"automountServiceAccountToken": False, "terminationGracePeriodSeconds": grace_seconds}
    if hostname:
        spec["hostname"] = hostname
    if dns_search:
        spec["dnsConfig"] = {"searches": [dns_search]}
    if pod_security_context:
        spec["securityContext"] = pod_security_context
    spec |= {
        "initContainers": [munge_container(image, security_context=munge_security_context)],
        "containers": [daemon],
        "volumes": volumes,
        **pod_settings(
            placement,
            image_pull_secrets,
            default_spread=default_spread,
            default_anti_affinity=default_anti_affinity,
        ),
    }
    return {
        "metadata": pod_metadata(
            placement,
            meta.labels(c, component, **(extra_labels or {})),
            {meta.CONFIG_HASH_ANNOTATION: config_hash},
        ),
        "spec": spec,
    }
