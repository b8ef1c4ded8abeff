"""The operator's policy: what a SlurmCluster may ask for, whatever its editor writes.

Worker and login pods are privileged, so whoever may edit a SlurmCluster would be root on the nodes its pods run on
if the spec could reach the node: a host directory, a program Slurm runs as root, a plugin, a root login, a pod on a
control-plane node. Every such door is closed here by default, and each opens only through the operator's own
install (its flags, their SLURMCTL_* variables, the Helm chart's `policy` values), never through the SlurmCluster: an
editor cannot talk the policy around. Each refusal is a `Problem` naming the field, so the reconcilers turn it into a
condition, an Event and a log line, and `slurmctl render` prints it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from .defaults import Component
from .problems import Problem
from .slurm_conf import slurm_conf_keys
from .spec import SlurmClusterSpec
from .types import Scheduling, VolumeRef

# slurm.conf keys extraConfig may set by default: scheduling, limits, timers, priorities, accounting of usage and log
# levels. An allowlist, not a denylist of dangerous keys, because Slurm grows keys every release and a new one that
# names a program, a plugin or a path (Prolog, TaskPlugin, PlugStackConfig, SlurmctldLogFile, CertmgrType, Include,
# ...) runs code as root or writes files on every node; none of these values is more than a number, a flag or the
# name of a plugin Slurm ships (SchedulerType, PriorityType, PreemptType pick among the plugins in the images'
# PluginDir, which only PluginDir could move). Anything else needs the admin's --allowed-slurm-keys.
TUNING_SLURM_KEYS: Final = (
    "AccountingStorageTRES",
    "AccountingStoreFlags",
    "BatchStartTimeout",
    "CompleteWait",
    "CpuFreqDef",
    "CpuFreqGovernors",
    "DebugFlags",
    "DefCpuPerGPU",
    "DefMemPerCPU",
    "DefMemPerGPU",
    "DefMemPerNode",
    "EnforcePartLimits",
    "FairShareDampeningFactor",
    "FirstJobId",
    "GetEnvTimeout",
    "GresTypes",
    "HealthCheckInterval",
    "HealthCheckNodeState",
    "InactiveLimit",
    "JobAcctGatherFrequency",
    "JobFileAppend",
    "JobRequeue",
    "KillOnBadExit",
    "KillWait",
    "MaxArraySize",
    "MaxJobCount",
    "MaxJobId",
    "MaxMemPerCPU",
    "MaxMemPerNode",
    "MaxStepCount",
    "MaxTasksPerNode",
    "MessageTimeout",
    "MinJobAge",
    "MpiDefault",
    "OverTimeLimit",
    "PreemptExemptTime",
    "PreemptMode",
    "PreemptType",
    "PriorityCalcPeriod",
    "PriorityDecayHalfLife",
    "PriorityFavorSmall",
    "PriorityFlags",
    "PriorityMaxAge",
    "PriorityType",
    "PriorityUsageResetPeriod",
    "PriorityWeightAge",
    "PriorityWeightAssoc",
    "PriorityWeightFairshare",
    "PriorityWeightJobSize",
    "PriorityWeightPartition",
    "PriorityWeightQOS",
    "PriorityWeightTRES",
    "PrologEpilogTimeout",
    "PropagatePrioProcess",
    "PropagateResourceLimits",
    "PropagateResourceLimitsExcept",
    "ReturnToService",
    "SchedulerParameters",
    "SchedulerTimeSlice",
    "SchedulerType",
    "SelectTypeParameters",
    "SlurmctldDebug",
    "SlurmctldTimeout",
    "SlurmdDebug",
    "SlurmdTimeout",
    "SlurmSchedLogLevel",
    "TCPTimeout",
    "TrackWCKey",
    "TreeWidth",
    "UnkillableStepTimeout",
    "VSizeFactor",
    "WaitTime",
)
# Partition options allowed by default: limits, access lists, priorities and sharing. Not DisableRootJobs (a
# partition could undo the cluster's), not the power-saving or node-list keys the operator writes.
TUNING_PARTITION_OPTIONS: Final = (
    "AllowAccounts",
    "AllowGroups",
    "AllowQos",
    "Alternate",
    "CpuBind",
    "DefCpuPerGPU",
    "DefMemPerCPU",
    "DefMemPerGPU",
    "DefMemPerNode",
    "DefaultTime",
    "DenyAccounts",
    "DenyQos",
    "ExclusiveTopo",
    "ExclusiveUser",
    "GraceTime",
    "Hidden",
    "LLN",
    "MaxCPUsPerNode",
    "MaxCPUsPerSocket",
    "MaxMemPerCPU",
    "MaxMemPerNode",
    "MaxNodes",
    "MaxTime",
    "MinNodes",
    "OverSubscribe",
    "OverTimeLimit",
    "PreemptMode",
    "PriorityJobFactor",
    "PriorityTier",
    "QOS",
    "ReqResv",
    "RootOnly",
    "SelectTypeParameters",
    "State",
    "TRESBillingWeights",
)
INCLUDE_REFUSED: Final = (
    "is refused whatever the operator's policy: the file it names is read from the daemon's disk, where no check "
    "reaches (spec.slurm.allowOperatorOwnedKeys does not change that)"
)
ANY_KEY: Final = "*"  # --allowed-slurm-keys='*': every key (the admin trusts every editor with slurm.conf)
PYXIS_KEY: Final = "PyxisPath"  # the pseudo-key that lets containers.pyxis load its plugin
# Volume sources a jail or sub-mount may use by default (a claimName is a persistentVolumeClaim). Each keeps the pod
# inside what its namespace already has: claims, scratch space, ConfigMaps (read-only data), and CSI volumes, which
# Pod Security's baseline profile allows too: a CSI driver serves inline volumes only when its CSIDriver object lists
# the Ephemeral mode, and drivers are installed by the cluster's admin, not by an editor. Refused unless the admin
# lists them: hostPath (the node's own files; also --allow-host-path), secret and projected (a Secret of the
# namespace could be the cluster's own munge or JWT key, and in the jail every user reads it), nfs, iscsi and other
# network sources (the node mounts them as root, from servers the editor picks), gitRepo (runs git as root on the
# node; deprecated), and any source this list does not know.
DEFAULT_VOLUME_SOURCES: Final = ("persistentVolumeClaim", "emptyDir", "ephemeral", "csi", "configMap")
HOST_PATH = "hostPath"
# The labels that mark control-plane nodes (the second is the name before Kubernetes 1.20), and their taints' keys.
CONTROL_PLANE_LABELS: Final = ("node-role.kubernetes.io/control-plane", "node-role.kubernetes.io/master")
_SELECTING = ("In", "Exists")  # node selector operators that pick nodes with the label (NotIn, DoesNotExist avoid)


@dataclass(frozen=True)
class Policy:
    """What the operator lets a SlurmCluster ask for (its flags). The defaults refuse everything that would make an
    editor root on a node; each field is one opt-in of the admin's.

    - `allow_host_path` (--allow-host-path): hostPath volumes in the jail and its sub-mounts.
    - `allowed_images` (--allowed-images): prefixes, each ending in `/`, every image the cluster runs must start with
      (the images a component names, and the defaults spec.slurm.imageRegistry/imageTag make); empty: any image.
    - `allowed_slurm_keys` (--allowed-slurm-keys, and its older name --allowed-slurm-programs): slurm.conf keys
      extraConfig and partition options may set beyond TUNING_SLURM_KEYS and TUNING_PARTITION_OPTIONS, `*` for any,
      and PYXIS_KEY for containers.pyxis. `Include` stays refused whatever is listed: the file it names is read from
      the daemon's disk, where no check reaches. spec.slurm.allowOperatorOwnedKeys does not widen this list: it only
      lifts the operator's own contract check.
    - `allowed_volume_sources` (--allowed-volume-sources): volume sources beyond DEFAULT_VOLUME_SOURCES.
    - `allow_control_plane_nodes` (--allow-control-plane-nodes): tolerations, node selectors and affinity that place
      pods on control-plane nodes.
    - `allow_root_logins` (--allow-root-logins): spec.login.sshRootPublicKeys.
    - `allow_root_jobs` (--allow-root-jobs): jobs of root; without it slurm.conf says DisableRootJobs=YES.
    - `allow_privileged_jobs` (--allow-privileged-jobs): a root job's programs keep root's capabilities; without it
      the chroot plugin runs each task with no-new-privileges and an empty capability bounding set (the worker pods
      say SLURMCTL_PRIVILEGED_JOBS=yes).
    - `allow_node_cordon` (--allow-node-cordon, with the RBAC of the admin's node-cordon opt-in): worker groups with
      replaceUnhealthy, whose unhealthy workers' Kubernetes nodes the operator cordons.
    """

    allow_host_path: bool = False
    allowed_images: tuple[str, ...] = ()
    allowed_slurm_keys: frozenset[str] = frozenset()
    allowed_volume_sources: frozenset[str] = frozenset()
    allow_control_plane_nodes: bool = False
    allow_root_logins: bool = False
    allow_root_jobs: bool = False
    allow_privileged_jobs: bool = False
    allow_node_cordon: bool = False

    def __post_init__(self) -> None:
        for prefix in self.allowed_images:
            if (problem := image_prefix_problem(prefix)) is not None:
                raise ValueError(problem)

    def allows_key(self, key: str, defaults: Iterable[str]) -> bool:
        """Whether extraConfig (defaults TUNING_SLURM_KEYS) or a partition (TUNING_PARTITION_OPTIONS) may set `key`;
        Slurm reads keys without case."""
        if key.lower() == "include":
            return False
        allowed = {k.lower() for k in (*defaults, *self.allowed_slurm_keys)}
        return ANY_KEY in allowed or key.lower() in allowed

    def allows_volume_source(self, name: str) -> bool:
        if name == HOST_PATH and self.allow_host_path:
            return True
        return name in DEFAULT_VOLUME_SOURCES or name in self.allowed_volume_sources


# What a permissive operator accepts: every opt-in on (for tests and for installs whose editors are all trusted).
OPEN_POLICY: Final = Policy(
    allow_host_path=True,
    allowed_slurm_keys=frozenset({ANY_KEY}),
    allowed_volume_sources=frozenset({HOST_PATH, "nfs", "secret", "gitRepo"}),
    allow_control_plane_nodes=True,
    allow_root_logins=True,
    allow_root_jobs=True,
    allow_privileged_jobs=True,
    allow_node_cordon=True,
)


def image_prefix_problem(prefix: str) -> str | None:
    """An image prefix must end at a path separator: `ghcr.io/slurmctl` would admit `ghcr.io/slurmctl-evil/x`."""
    if not prefix.endswith("/"):
        return f"image prefix {prefix!r} must end with '/' (e.g. {prefix.rstrip('/') + '/'!r})"
    return None


def policy_problems(spec: SlurmClusterSpec, policy: Policy, path: str = "spec") -> list[Problem]:
    """Everything in the spec the operator's policy refuses, each naming its field and the flag that would allow it."""
    problems = _image_problems(spec, policy, path)
    problems += _slurm_key_problems(spec, policy, path)
    problems += volume_problems(spec, policy, path)
    if not policy.allow_control_plane_nodes:
        for base, scheduling, _ in spec.components_with_pods(path):
            problems += control_plane_problems(scheduling, base)
    if spec.login.ssh_root_public_keys and not policy.allow_root_logins:
        problems.append(
            Problem(
                f"{path}.login.sshRootPublicKeys",
                "root logins are refused by this operator's policy (root in the privileged login pod is root on its "
                "node); log in as a user of the jail, or start the operator with --allow-root-logins",
            )
        )
    if not policy.allow_node_cordon:
        problems += [
            Problem(
                f"{path}.workers[{index}].replaceUnhealthy",
                "replacing unhealthy workers cordons their Kubernetes nodes, which this operator may not do: set it "
                "to false, or ask the cluster admin for the node-cordon opt-in (--allow-node-cordon and its RBAC; "
                "docs/security.md)",
            )
            for index, group in enumerate(spec.workers)
            if group.replace_unhealthy
        ]
    return problems


def _image_problems(spec: SlurmClusterSpec, policy: Policy, path: str) -> list[Problem]:
    if not policy.allowed_images:
        return []
    allowed = ", ".join(policy.allowed_images)
    return [
        Problem(where, f'image "{image}" is not allowed by the operator (allowed: {allowed})')
        for where, image in _images(spec, path)
        if not image.startswith(policy.allowed_images)
    ]


def _slurm_key_problems(spec: SlurmClusterSpec, policy: Policy, path: str) -> list[Problem]:
    why = (
        "is not allowed by the operator's policy: only scheduling and tuning keys are (a program, plugin or path "
        "key runs code as root on the nodes); the operator's --allowed-slurm-keys can add it"
    )
    problems = [
        Problem(f"{path}.slurm.extraConfig", f"line {number}: {key} {INCLUDE_REFUSED if key == 'Include' else why}")
        for number, key in slurm_conf_keys(spec.slurm.extra_config or "")
        if not policy.allows_key(key, TUNING_SLURM_KEYS)
    ]
    for index, partition in enumerate(spec.partitions):
        problems += [
            Problem(f"{path}.partitions[{index}].options.{key}", f"{key} {why}")
            for key in partition.options
            if not policy.allows_key(key, TUNING_PARTITION_OPTIONS)
        ]
    if spec.containers.pyxis.enabled and not policy.allows_key(PYXIS_KEY, ()):
        problems.append(
            Problem(
                f"{path}.containers.pyxis",
                f"pyxis is a plugin slurmstepd loads as root: not allowed by the operator's policy unless its "
                f"--allowed-slurm-keys lists {PYXIS_KEY}",
            )
        )
    return problems


def volume_problems(spec: SlurmClusterSpec, policy: Policy, path: str = "spec") -> list[Problem]:
    """Every jail or sub-mount volume whose source the policy refuses."""
    volumes: list[tuple[str, VolumeRef]] = [(f"{path}.jail.volume", spec.jail.volume)]
    volumes += [(f"{path}.jail.subMounts[{i}].volume", m.volume) for i, m in enumerate(spec.jail.sub_mounts)]
    problems = []
    for where, volume in volumes:
        for name in volume.source or {}:
            if policy.allows_volume_source(name):
                continue
            if name == HOST_PATH:
                message = (
                    "hostPath volumes are refused by this operator's policy (privileged pods with a host directory "
                    "are root on the node); use a PersistentVolumeClaim instead, or start the operator "
                    "with --allow-host-path"
                )
            else:
                message = (
                    f"{name} volumes are refused by this operator's policy (allowed: claimName, "
                    f"{', '.join(sorted({*DEFAULT_VOLUME_SOURCES, *policy.allowed_volume_sources}))}); the operator's "
                    f"--allowed-volume-sources can add {name}"
                )
            problems.append(Problem(f"{where}.source.{name}", message))
    return problems


def control_plane_problems(scheduling: Scheduling, base: str) -> list[Problem]:
    """Tolerations of the control-plane taints (an empty key with Exists tolerates every taint), and node selectors
    or node affinity that pick control-plane nodes: privileged pods there are root beside the API server's keys."""
    why = (
        "would place privileged pods on control-plane nodes, which this operator's policy refuses (start it with "
        "--allow-control-plane-nodes to allow it)"
    )
    problems = []
    for index, toleration in enumerate(scheduling.tolerations):
        key = toleration.get("key") or ""
        if key in CONTROL_PLANE_LABELS or (not key and toleration.get("operator") == "Exists"):
            what = f"tolerates {key}" if key else "tolerates every taint"
            problems.append(Problem(f"{base}.tolerations[{index}]", f"{what}: {why}"))
    problems += [
        Problem(f"{base}.nodeSelector.{key}", f"selects {key}: {why}")
        for key in scheduling.node_selector
        if key in CONTROL_PLANE_LABELS
    ]
    node_affinity = _mapping((scheduling.affinity or {}).get("nodeAffinity"))
    required = _mapping(node_affinity.get("requiredDuringSchedulingIgnoredDuringExecution"))
    required_terms = _list(required.get("nodeSelectorTerms"))
    preferred = _list(node_affinity.get("preferredDuringSchedulingIgnoredDuringExecution"))
    terms = [
        (f"requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[{i}]", t)
        for i, t in enumerate(required_terms)
    ]
    terms += [
        (f"preferredDuringSchedulingIgnoredDuringExecution[{i}].preference", _mapping(p).get("preference"))
        for i, p in enumerate(preferred)
    ]
    for where, term in terms:
        for position, item in enumerate(_list(_mapping(term).get("matchExpressions"))):
            expression = _mapping(item)
            if expression.get("key") in CONTROL_PLANE_LABELS and expression.get("operator") in _SELECTING:
                field = f"{base}.affinity.nodeAffinity.{where}.matchExpressions[{position}]"
                problems.append(Problem(field, f"selects {expression['key']}: {why}"))
    return problems


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _images(spec: SlurmClusterSpec, path: str) -> list[tuple[str, str]]:
    """(field, image) of every image the cluster runs: the component's own field when set, else the default (named
    by spec.slurm.imageRegistry)."""
    named: list[tuple[str, Component, str | None]] = [
        (f"{path}.jail.image", "jail", spec.jail.image),
        (f"{path}.populateJail.image", "populate-jail", spec.populate_jail.image),
        (f"{path}.controller.image", "controller", spec.controller.image),
        (f"{path}.login.image", "login", spec.login.image),
        (f"{path}.accounting.image", "accounting", spec.accounting.image),
        (f"{path}.rest.image", "rest", spec.rest.image),
        (f"{path}.healthChecks.ncclBenchmark.image", "nccl-benchmark", spec.health_checks.nccl_benchmark.image),
        *((f"{path}.workers[{i}].image", "worker", g.image) for i, g in enumerate(spec.workers)),
    ]
    out = [
        (where if own else f"{path}.slurm.imageRegistry", spec.image_for(component, own))
        for where, component, own in named
    ]
    if spec.accounting.mariadb is not None and spec.accounting.mariadb.image:
        out.append((f"{path}.accounting.mariadb.image", spec.accounting.mariadb.image))
    return out
