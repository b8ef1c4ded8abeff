"""What the schema cannot say: checks across fields, each problem reported with the field path it is about.

The reconcilers turn the problems into a `False` condition and the phase `Failed`; `slurmctl render` prints them.
Nothing here raises on bad input: any object, however malformed, yields a list of problems.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from decimal import Decimal
from typing import Any

from pydantic import ValidationError

from .cluster import SlurmCluster
from .defaults import (
    ACCOUNTING_SLURM_KEYS,
    DEFAULT_TRES,
    GPU_HEALTH_CHECK_SLURM_KEYS,
    LIMITS_SLURM_KEYS,
    MAX_CLUSTER_NAME_LENGTH,
    MAX_OPTION_NAME_LENGTH,
    MAX_TOTAL_WORKERS,
    MIN_POWER_SAVE_SECONDS,
    OPERATOR_OWNED_SLURM_KEYS,
    POWER_SAVE_SLURM_KEYS,
    TOPOLOGY_SLURM_KEYS,
)
from .identity import filter_problem
from .jail import MIN_JOB_TMP_SIZE
from .jail_paths import check_jail
from .limits import TRES_PATTERN
from .maintenance import parse_timestamp, schedule_problem
from .passthrough import check_passthrough
from .policy import Policy, policy_problems
from .problems import Problem, duplicates, problems_from_error
from .sizes import CONFIGMAP_DATA_LIMIT, slurm_configs_bound
from .slurm_conf import slurm_conf_keys
from .spec import SlurmClusterSpec
from .types import DNS_LABEL_PATTERN, parse_duration, parse_quantity

_DNS_LABEL = re.compile(DNS_LABEL_PATTERN)
_OPTION_KEY = re.compile(r"[A-Za-z][A-Za-z0-9]*")
_PLUGIN_ARGUMENT_KEY = re.compile(r"[A-Za-z][A-Za-z0-9_]*")
_ACCOUNTING_STORAGE_TRES = re.compile(r"^\s*AccountingStorageTRES\s*=\s*(\S+)", re.IGNORECASE)
GPU_TRES = "gres/gpu"
_TRES_NAME = re.compile(TRES_PATTERN)
MAX_TRES_NAME_LENGTH = 64
NORMAL_QOS = "normal"  # the QOS every Slurm database has
# Partition keys the operator writes itself from the structured fields.
_RESERVED_PARTITION_OPTIONS = frozenset({"partitionname", "nodes", "default"})
# Keywords that start or belong to other slurm.conf records: on a partition line they would define nodes or a second
# record, or make slurmctld refuse the file. Slurm reads keys case-insensitively, so these are lower case.
_RECORD_KEYWORDS = frozenset(
    {"nodename", "nodeset", "nodeaddr", "nodehostname", "downnodes", "frontendname", "frontendaddr", "switchname",
     "include"}
)  # fmt: skip
# Where the operator never creates anything, whatever its RBAC allows (a ClusterRole cannot exclude a namespace).
SYSTEM_NAMESPACES = ("kube-system", "kube-public", "kube-node-lease")


def check_cluster(obj: Any, *, policy: Policy | None = None) -> tuple[SlurmCluster | None, list[Problem]]:
    """Parse a SlurmCluster (a live object or a manifest) and validate it; never raises.

    Returns the model (None when it does not parse) and every problem found: schema problems when it does not
    parse, else the name, the semantic checks and what the operator's `policy` refuses (its flags; default: the
    default flags, which refuse whatever would make an editor root on a node).
    """
    if not isinstance(obj, Mapping):
        return None, [Problem("<root>", f"expected an object, got {type(obj).__name__}")]
    try:
        cluster = SlurmCluster.model_validate(obj)
    except ValidationError as error:
        return None, sorted({*problems_from_error(error), *_nul_bytes(obj.get("spec"), "spec")})
    problems = _check_name(cluster.metadata.name)
    if cluster.metadata.namespace in SYSTEM_NAMESPACES:
        problems.append(
            Problem(
                "metadata.namespace",
                f"SlurmClusters are not run in {cluster.metadata.namespace}: the namespaces Kubernetes keeps for "
                f"itself ({', '.join(SYSTEM_NAMESPACES)}) get no workloads from slurmctl",
            )
        )
    problems += _nul_bytes(obj.get("spec"), "spec")
    problems += validate_spec(cluster.spec)
    problems += policy_problems(cluster.spec, policy or Policy())
    return cluster, problems


def _nul_bytes(value: Any, path: str) -> list[Problem]:
    """Every string (key or value) with a NUL byte: C code (Slurm, sshd, the chroot plugin) would cut it there."""
    problems = []
    if isinstance(value, str) and "\0" in value:
        problems.append(Problem(path, "contains a NUL byte"))
    elif isinstance(value, Mapping):
        for key, item in value.items():
            where = f"{path}.{str(key).encode('unicode_escape').decode()}"
            if isinstance(key, str) and "\0" in key:
                problems.append(Problem(where, "the key contains a NUL byte"))
            problems += _nul_bytes(item, where)
    elif isinstance(value, list):
        for index, item in enumerate(value):
            problems += _nul_bytes(item, f"{path}[{index}]")
    return problems


def validate_spec(spec: SlurmClusterSpec, *, path: str = "spec") -> list[Problem]:
    """Every semantic problem of a parsed spec, in field order."""
    problems: list[Problem] = []
    problems += _check_workers(spec, path)
    problems += _check_partitions(spec, path)
    problems += _check_extra_config(spec, path)
    problems += check_jail(spec, path)
    problems += _check_job_tmp(spec, path)
    problems += _check_login(spec, path)
    problems += _check_accounting(spec, path)
    problems += _check_containers(spec, path)
    problems += _check_health_checks(spec, path)
    problems += _check_topology(spec, path)
    problems += _check_maintenance(spec, path)
    problems += _check_identity(spec, path)
    problems += _check_directory(spec, path)
    problems += [Problem(where, message) for where, message in check_passthrough(spec, path)]
    problems += _check_config_size(spec, path)
    return problems


def _check_config_size(spec: SlurmClusterSpec, path: str) -> list[Problem]:
    """A spec whose Slurm configs could exceed what a ConfigMap holds is refused, naming what makes them big."""
    parts = slurm_configs_bound(spec, path)
    total = sum(parts.values())
    if total <= CONFIGMAP_DATA_LIMIT:
        return []
    growing = sorted(((size, where) for where, size in parts.items() if where != "fixed"), reverse=True)
    largest = growing[0][1]
    breakdown = ", ".join(f"{where} {size:,}" for size, where in growing)
    return [
        Problem(
            largest,
            f"the Slurm configs would take up to {total:,} bytes, more than the {CONFIGMAP_DATA_LIMIT:,} a ConfigMap "
            f"holds ({breakdown}); shrink the largest (fewer or shorter features, options or lines)",
        )
    ]


def _check_name(name: str | None) -> list[Problem]:
    if name is None:
        return []
    if len(name) > MAX_CLUSTER_NAME_LENGTH or not _DNS_LABEL.fullmatch(name):
        return [
            Problem(
                "metadata.name",
                f'"{name}" must be a DNS label (lowercase letters, digits and hyphens, starting with a letter) of '
                f"at most {MAX_CLUSTER_NAME_LENGTH} characters",
            )
        ]
    return []


def _check_workers(spec: SlurmClusterSpec, path: str) -> list[Problem]:
    problems = duplicates([group.name for group in spec.workers], f"{path}.workers", "worker group")
    total = sum(group.node_count for group in spec.workers)
    if total > MAX_TOTAL_WORKERS:
        problems.append(
            Problem(f"{path}.workers", f"{total} worker nodes in total exceed the maximum of {MAX_TOTAL_WORKERS}")
        )
    for index, group in enumerate(spec.workers):
        if (scale := group.autoscale) is None:
            continue
        where = f"{path}.workers[{index}].autoscale"
        if scale.min > scale.max:
            problems.append(Problem(f"{where}.min", f"min {scale.min} is more than max {scale.max}"))
        if parse_duration(scale.idle_time).total_seconds() < MIN_POWER_SAVE_SECONDS:
            problems.append(Problem(f"{where}.idleTime", f"at least {MIN_POWER_SAVE_SECONDS}s"))
        if parse_duration(scale.resume_timeout).total_seconds() < MIN_POWER_SAVE_SECONDS:
            problems.append(Problem(f"{where}.resumeTimeout", f"at least {MIN_POWER_SAVE_SECONDS}s"))
        if not spec.rest.enabled:
            problems.append(
                Problem(where, "an elastic group needs slurmrestd (spec.rest.enabled): it follows Slurm's power states")
            )
        if spec.topology is not None:
            problems.append(
                Problem(
                    where,
                    "an elastic group cannot be combined with spec.topology yet (its powered-down nodes "
                    "have no place in topology.conf)",
                )
            )
    return problems


def _check_job_tmp(spec: SlurmClusterSpec, path: str) -> list[Problem]:
    """Each size of spec.jail.jobTmp and spec.workers[].jobTmp: at least MIN_JOB_TMP_SIZE (a tmpfs of 0 bytes would
    have no limit at all)."""
    where = [(f"{path}.jail.jobTmp", spec.jail.job_tmp)]
    where += [(f"{path}.workers[{index}].jobTmp", group.job_tmp) for index, group in enumerate(spec.workers)]
    problems = []
    for base, job_tmp in where:
        for name, size in (("tmpSize", job_tmp.tmp_size), ("shmSize", job_tmp.shm_size)):
            value = _bytes(size) if size is not None else None
            if value is not None and value < MIN_JOB_TMP_SIZE:
                problems.append(Problem(f"{base}.{name}", f"{size} is below the minimum of 1Mi"))
    return problems


def _check_partitions(spec: SlurmClusterSpec, path: str) -> list[Problem]:
    base = f"{path}.partitions"
    problems = duplicates([partition.name for partition in spec.partitions], base, "partition")
    groups = {group.name for group in spec.workers}
    defaults = [index for index, partition in enumerate(spec.partitions) if partition.default]
    for index, partition in enumerate(spec.partitions):
        if partition.name.lower() == "default":
            problems.append(
                Problem(
                    f"{base}[{index}].name",
                    'Slurm reserves "default" (PartitionName=DEFAULT sets defaults for every partition); '
                    "choose another name",
                )
            )
        seen: set[str] = set()
        for position, group in enumerate(partition.workers):
            where = f"{base}[{index}].workers[{position}]"
            if group not in groups:
                problems.append(Problem(where, f'unknown worker group "{group}"'))
            elif group in seen:
                problems.append(Problem(where, f'worker group "{group}" is listed twice'))
            seen.add(group)
        for key in partition.options:
            where = f"{base}[{index}].options.{key}"
            if not _OPTION_KEY.fullmatch(key) or len(key) > MAX_OPTION_NAME_LENGTH:
                problems.append(
                    Problem(
                        where,
                        "option names are letters and digits, as slurm.conf spells them "
                        f"(at most {MAX_OPTION_NAME_LENGTH})",
                    )
                )
            elif key.lower() in _RESERVED_PARTITION_OPTIONS:
                problems.append(Problem(where, f"{key} is set by slurmctl from name, workers and default"))
            elif key.lower() in _RECORD_KEYWORDS:
                problems.append(Problem(where, f"{key} is a slurm.conf node or record keyword, not a partition option"))
    if not defaults:
        problems.append(Problem(base, "no partition has default: true (exactly one must)"))
    for index in defaults[1:]:
        problems.append(
            Problem(f"{base}[{index}].default", f"more than one default partition (also {base}[{defaults[0]}])")
        )
    return problems


def operator_owned_keys(spec: SlurmClusterSpec) -> tuple[str, ...]:
    """The slurm.conf keys extraConfig may not set for this spec (see defaults.OPERATOR_OWNED_SLURM_KEYS)."""
    owned: tuple[str, ...] = OPERATOR_OWNED_SLURM_KEYS
    if spec.accounting.enabled:
        owned += ACCOUNTING_SLURM_KEYS
    if spec.gpu_groups and spec.health_checks.gpu.enabled:
        owned += GPU_HEALTH_CHECK_SLURM_KEYS
    if spec.accounting.declares_limits:
        owned += LIMITS_SLURM_KEYS
    if spec.topology is not None:
        owned += TOPOLOGY_SLURM_KEYS
    if spec.elastic_groups:
        owned += POWER_SAVE_SLURM_KEYS
    return owned


def tracked_tres(spec: SlurmClusterSpec) -> set[str]:
    """The TRES this cluster's accounting knows: Slurm's defaults, gres/gpu with GPU groups (slurm.conf's
    AccountingStorageTRES), and whatever extraConfig adds to AccountingStorageTRES."""
    tres = set(DEFAULT_TRES)
    if spec.gpu_groups:
        tres.add(GPU_TRES)
    for line in (spec.slurm.extra_config or "").splitlines():
        match = _ACCOUNTING_STORAGE_TRES.match(line)
        if match:
            tres.update(t.strip().lower() for t in match.group(1).split(",") if t.strip())
    return tres


def _check_extra_config(spec: SlurmClusterSpec, path: str) -> list[Problem]:
    slurm = spec.slurm
    if not slurm.extra_config or slurm.allow_operator_owned_keys:
        return []
    owned = {key.lower(): key for key in operator_owned_keys(spec)}
    return [
        Problem(
            f"{path}.slurm.extraConfig",
            f"line {line}: {owned[key.lower()]} is owned by slurmctl (it carries the contract between slurmctl and "
            f"its pods, or switches a guarantee off); remove it, or set {path}.slurm.allowOperatorOwnedKeys: true "
            "to override it at your own risk",
        )
        for line, key in slurm_conf_keys(slurm.extra_config)
        if key.lower() in owned
    ]


def _check_login(spec: SlurmClusterSpec, path: str) -> list[Problem]:
    service = spec.login.service
    base = f"{path}.login.service"
    problems = []
    if service.node_port is not None and service.type == "ClusterIP":
        problems.append(Problem(f"{base}.nodePort", "needs type NodePort or LoadBalancer"))
    if service.type != "LoadBalancer":
        if service.load_balancer_ip:
            problems.append(Problem(f"{base}.loadBalancerIP", "needs type LoadBalancer"))
        if service.load_balancer_source_ranges:
            problems.append(Problem(f"{base}.loadBalancerSourceRanges", "needs type LoadBalancer"))
    return problems


def _check_identity(spec: SlurmClusterSpec, path: str) -> list[Problem]:
    """The rules of api/v1/identity.py, naming the entry at fault: ids and names unique, every group a user names
    declared, a user's own group (no gid) clashing with no declared group."""
    identity = spec.identity
    base = f"{path}.identity"
    problems = duplicates([u.name for u in identity.users], f"{base}.users", "user")
    problems += duplicates([g.name for g in identity.groups], f"{base}.groups", "group")
    first_uid: dict[int, int] = {}
    for index, user in enumerate(identity.users):
        if (other := first_uid.setdefault(user.uid, index)) != index:
            problems.append(Problem(f"{base}.users[{index}].uid", f"uid {user.uid} is also {base}.users[{other}]'s"))
    first_gid: dict[int, int] = {}
    for index, group in enumerate(identity.groups):
        if (other := first_gid.setdefault(group.gid, index)) != index:
            problems.append(Problem(f"{base}.groups[{index}].gid", f"gid {group.gid} is also {base}.groups[{other}]'s"))
    gids = {g.gid: g.name for g in identity.groups}
    names = {g.name: g.gid for g in identity.groups}
    for index, user in enumerate(identity.users):
        where = f"{base}.users[{index}]"
        if user.gid is not None and user.gid not in gids:
            problems.append(Problem(f"{where}.gid", f"no group of {base}.groups has gid {user.gid}"))
        for position, name in enumerate(user.groups):
            if name not in names:
                problems.append(
                    Problem(f"{where}.groups[{position}]", f'unknown group "{name}" (not in {base}.groups)')
                )
        if user.gid is None and (user.name in names or user.uid in gids):
            clash = user.name if user.name in names else gids[user.uid]
            problems.append(
                Problem(
                    f"{where}.gid",
                    f'empty, so the user gets a group of its own ("{user.name}", gid {user.uid}), but group "{clash}" '
                    f"of {base}.groups has that name or gid: set gid",
                )
            )
    return problems


def _check_accounting(spec: SlurmClusterSpec, path: str) -> list[Problem]:
    accounting = spec.accounting
    if not accounting.enabled:
        if accounting.accounts or accounting.qos:
            return [Problem(f"{path}.accounting", "accounts and qos need accounting: set enabled: true")]
        return []
    mariadb = accounting.mariadb is not None and accounting.mariadb.enabled
    if accounting.external is None and not mariadb:
        return [Problem(f"{path}.accounting", "accounting is enabled but neither external nor mariadb.enabled is set")]
    if accounting.external is not None and mariadb:
        return [Problem(f"{path}.accounting", "set either external or mariadb.enabled, not both")]
    return _check_limits(spec, path)


def _check_limits(spec: SlurmClusterSpec, path: str) -> list[Problem]:
    """What Slurm would refuse, found before anything is sent: unknown TRES, parents and QOS."""
    accounting = spec.accounting
    base = f"{path}.accounting"
    problems: list[Problem] = []
    tres = tracked_tres(spec)
    known = ", ".join(sorted(tres))
    # The API server refuses these too (list-map keys), but not behind a CRD without them: two records of one name
    # would have the operator set each in turn.
    problems += duplicates([account.name for account in accounting.accounts], f"{base}.accounts", "account")
    problems += duplicates([qos.name for qos in accounting.qos], f"{base}.qos", "QOS")

    def check_tres(where: str, limits: Mapping[str, int], key: str) -> None:
        for name in limits:
            if not _TRES_NAME.fullmatch(name) or len(name) > MAX_TRES_NAME_LENGTH:
                problems.append(Problem(f"{where}.{key}.{name}", "not a TRES name (type or type/name, e.g. gres/gpu)"))
            elif name.lower() not in tres:
                problems.append(Problem(f"{where}.{key}.{name}", f'unknown TRES "{name}": this cluster tracks {known}'))

    qos_names = {q.name for q in accounting.qos} | {NORMAL_QOS}
    for index, qos in enumerate(accounting.qos):
        where = f"{base}.qos[{index}]"
        check_tres(where, qos.max_tres_per_job, "maxTRESPerJob")
        check_tres(where, qos.max_tres_per_user, "maxTRESPerUser")
        check_tres(where, qos.grp_tres, "grpTRES")
    parents = {a.name: a.parent for a in accounting.accounts}
    for index, account in enumerate(accounting.accounts):
        where = f"{base}.accounts[{index}]"
        if account.name == "root":
            problems.append(Problem(f"{where}.name", "root is Slurm's own account: it cannot be declared"))
        if account.parent != "root" and account.parent not in parents:
            problems.append(
                Problem(f"{where}.parent", f'unknown account "{account.parent}" (root or one declared here)')
            )
        elif _parent_cycle(account.name, parents):
            problems.append(Problem(f"{where}.parent", f'account "{account.name}" would be its own ancestor'))
        for position, name in enumerate(account.qos):
            if name not in qos_names:
                problems.append(
                    Problem(f"{where}.qos[{position}]", f'unknown QOS "{name}" (normal or one declared here)')
                )
        if account.default_qos is not None and account.default_qos not in (account.qos or qos_names):
            problems.append(Problem(f"{where}.defaultQos", f'"{account.default_qos}" is not one of the account\'s qos'))
        check_tres(where, account.max_tres_per_job, "maxTRESPerJob")
        check_tres(where, account.grp_tres, "grpTRES")
    return problems


def _parent_cycle(name: str, parents: Mapping[str, str]) -> bool:
    seen = {name}
    current = parents.get(name)
    while current is not None and current != "root":
        if current in seen:
            return True
        seen.add(current)
        current = parents.get(current)
    return False


def _check_containers(spec: SlurmClusterSpec, path: str) -> list[Problem]:
    """A plugin argument is one `key=value` word of a plugstack.conf line: the key may not break it up."""
    base = f"{path}.containers.pyxis.arguments"
    return [
        Problem(f"{base}.{key}", "argument names are letters, digits and '_', starting with a letter (at most 64)")
        for key in spec.containers.pyxis.arguments
        if not _PLUGIN_ARGUMENT_KEY.fullmatch(key) or len(key) > MAX_OPTION_NAME_LENGTH
    ]


def _check_topology(spec: SlurmClusterSpec, path: str) -> list[Problem]:
    """Exactly one of tree and block; a label names one level only (the API server checks that too, `set`)."""
    topology = spec.topology
    if topology is None:
        return []
    base = f"{path}.topology"
    given = [name for name, value in (("tree", topology.tree), ("block", topology.block)) if value is not None]
    if len(given) != 1:
        return [Problem(base, f"set exactly one of tree and block (got {', '.join(given) or 'neither'})")]
    problems = []
    if topology.tree is not None:
        first: dict[str, int] = {}
        for index, label in enumerate(topology.tree.levels):
            if label in first:
                problems.append(
                    Problem(f"{base}.tree.levels[{index}]", f'label "{label}" is also level {first[label]}')
                )
            first.setdefault(label, index)
    return problems


def _check_health_checks(spec: SlurmClusterSpec, path: str) -> list[Problem]:
    nccl = spec.health_checks.nccl_benchmark
    base = f"{path}.healthChecks.ncclBenchmark"
    problems = []
    if nccl.enabled and not spec.gpu_groups:
        problems.append(Problem(f"{base}.enabled", "the NCCL benchmark needs a worker group with gpus > 0"))
    low, high = _bytes(nccl.min_bytes), _bytes(nccl.max_bytes)
    if low is not None and high is not None and low > high:
        problems.append(Problem(f"{base}.maxBytes", f"{nccl.max_bytes} is smaller than minBytes {nccl.min_bytes}"))
    return problems


def _check_maintenance(spec: SlurmClusterSpec, path: str) -> list[Problem]:
    """The CRD's rules on each window (a CRD without them lets such a spec through), and what only the operator can
    check: that a schedule is a cron expression it can iterate, and that a window lasts."""
    problems = []
    for index, window in enumerate(spec.maintenance.windows):
        where = f"{path}.maintenance.windows[{index}]"
        recurring, absolute = window.schedule is not None, window.start is not None
        if recurring != (window.duration is not None):
            problems.append(Problem(where, "schedule and duration go together (a recurring window)"))
        if absolute != (window.end is not None):
            problems.append(Problem(where, "start and end go together (an absolute window)"))
        if recurring == absolute:
            problems.append(
                Problem(where, "a window is either recurring (schedule and duration) or absolute (start and end)")
            )
        if window.start and window.end and parse_timestamp(window.end) <= parse_timestamp(window.start):
            problems.append(Problem(f"{where}.end", f"end {window.end} is not after start {window.start}"))
        if window.schedule is not None and (problem := schedule_problem(window.schedule)) is not None:
            problems.append(Problem(f"{where}.schedule", problem))
        if window.duration is not None and parse_duration(window.duration).total_seconds() < 60:
            problems.append(Problem(f"{where}.duration", f"{window.duration} is shorter than a minute"))
    return problems


def _check_directory(spec: SlurmClusterSpec, path: str) -> list[Problem]:
    """The directory's rules (api/v1/identity.py's CEL), and the filters' parentheses, which CEL cannot count."""
    directory = spec.identity.directory
    if directory is None:
        return []
    base = f"{path}.identity.directory"
    problems = [
        Problem(f"{base}.{name}", "must be one line")
        for name, value in (("baseDN", directory.base_dn), ("bindDN", directory.bind_dn))
        if value is not None and ("\n" in value or "\r" in value)
    ]
    if (directory.bind_dn is None) != (directory.bind_password_secret_ref is None):
        problems.append(
            Problem(f"{base}.bindPasswordSecretRef", "bindDN and bindPasswordSecretRef go together (both empty: "
                    "anonymous binds)")
        )  # fmt: skip
    if not directory.start_tls and not all(uri.startswith("ldaps://") for uri in directory.uris):
        problems.append(Problem(f"{base}.uris", "the directory is reached over TLS: every URI is ldaps://, or "
                                "startTLS is true"))  # fmt: skip
    if directory.start_tls and not all(uri.startswith("ldap://") for uri in directory.uris):
        problems.append(Problem(f"{base}.startTLS", "startTLS is for ldap:// URIs (ldaps:// is TLS from the start)"))
    if directory.ca is not None and (directory.ca.config_map_key_ref is None) == (directory.ca.secret_key_ref is None):
        problems.append(Problem(f"{base}.ca", "set exactly one of configMapKeyRef and secretKeyRef"))
    for name, value in (("userFilter", directory.user_filter), ("groupFilter", directory.group_filter)):
        if value is not None and (problem := filter_problem(value)) is not None:
            problems.append(Problem(f"{base}.{name}", problem))
    return problems


def _bytes(quantity: int | str) -> Decimal | None:
    try:
        return parse_quantity(quantity)
    except ValueError:
        return None
