"""The Kubernetes objects a SlurmCluster passes through to its pods, checked as the API server would check them.

Volume sources, tolerations, affinity, topology spread constraints, node selectors, Service annotations and resources
go into Pod templates unchanged. Left unchecked, a mistake there is only found when a child is applied (422) or,
worse, when an old API server accepts a StatefulSet whose pods then never get created (Kubernetes 1.20 does not
validate the pod template). So they are checked here, before anything is applied, and every problem names the field
in the SlurmCluster.

Structure comes from the Kubernetes OpenAPI schema shipped with kubernetes-validate (strict: unknown fields are
errors) for KUBERNETES_SCHEMA_VERSION. The schema cannot express what the API server's Go validation adds (enums,
label key syntax, requests <= limits), so those rules are written out below, each as Kubernetes states it.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable, Mapping
from decimal import Decimal
from typing import Any

import jsonschema
from kubernetes_validate import utils as kubernetes_schemas
from referencing import Registry, Resource

from slurmctl.api.v1.spec import SlurmClusterSpec
from slurmctl.api.v1.types import RESERVED_WHY, ResourceRequirements, Scheduling, VolumeRef, parse_quantity, reserved

# A current minor, as the renderer tests use: its schema describes every field the pods of all supported servers use.
KUBERNETES_SCHEMA_VERSION = "1.30"
# Kubernetes' limit on the total size of an object's annotations (apimachinery TotalAnnotationSizeLimitB).
MAX_ANNOTATIONS_BYTES = 256 * 1024
MAX_MESSAGE = 200

_LABEL_NAME = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
_TOLERATION_OPERATORS = ("Exists", "Equal")
_TAINT_EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")
_NODE_SELECTOR_OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt")
_LABEL_SELECTOR_OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist")
_UNSATISFIABLE_ACTIONS = ("DoNotSchedule", "ScheduleAnyway")
# Resources Kubernetes names without a domain; any other resource is `<domain>/<name>` (e.g. nvidia.com/gpu).
_NATIVE_RESOURCES = re.compile(r"^(cpu|memory|ephemeral-storage|storage|hugepages-[0-9]+[KMGTPE]?i?)$")

Problems = list[tuple[str, str]]


@functools.cache
def _validator(definition: str) -> jsonschema.protocols.Validator:
    """A strict validator for one Kubernetes type; the schema (1.2 MB of JSON) is read once per process."""
    wanted = tuple(int(part) for part in KUBERNETES_SCHEMA_VERSION.split("."))
    versions = [v for v in kubernetes_schemas.all_versions() if tuple(map(int, v.split(".")[:2])) <= wanted]
    version = versions[-1]
    definitions = kubernetes_schemas.schema_contents(
        f"kubernetes-json-schema/v{version}-local-strict/_definitions.json", version
    )
    registry: Registry[Any] = Resource.from_contents(definitions) @ Registry()
    schema = {"$ref": f"{definitions['$id']}#/$defs/{definition}"}
    validator: jsonschema.protocols.Validator = jsonschema.Draft202012Validator(schema, registry=registry)
    return validator


def _path(base: str, parts: Iterable[Any]) -> str:
    text = base
    for part in parts:
        text += f"[{part}]" if isinstance(part, int) else f".{part}"
    return text


def _schema_problems(definition: str, value: Any, base: str, *, skip: int = 0) -> Problems:
    """Schema errors of `value` as a Kubernetes `definition`; `skip` drops leading path parts that only exist in the
    wrapper object built around the user's value."""
    errors = sorted(_validator(definition).iter_errors(value), key=lambda e: [str(p) for p in e.absolute_path])
    return [(_path(base, list(e.absolute_path)[skip:]), _short(e.message)) for e in errors]


def _field(base: str, key: Any) -> str:
    """`base.key`, with control characters in the key escaped so the path stays one printable line."""
    return f"{base}.{str(key).encode('unicode_escape').decode()}"


def _short(message: str) -> str:
    message = " ".join(message.split())
    return message if len(message) <= MAX_MESSAGE else message[: MAX_MESSAGE - 3] + "..."


def _qualified_name(key: str) -> str | None:
    """What is wrong with a label or annotation key (`[prefix/]name`), as Kubernetes' IsQualifiedName says."""
    prefix, _, name = key.rpartition("/")
    if "/" in key and (not prefix or len(prefix) > 253 or not _DNS_SUBDOMAIN.fullmatch(prefix)):
        return f"{key!a}: the prefix before '/' must be a lowercase DNS subdomain of at most 253 characters"
    if not name or len(name) > 63 or not _LABEL_NAME.fullmatch(name):
        return (
            f"{key!a}: the name must be at most 63 characters of letters, digits, '-', '_' or '.', starting and "
            "ending with a letter or digit"
        )
    return None


def _label_value(value: str) -> str | None:
    if len(value) > 63 or not _LABEL_VALUE.fullmatch(value):
        return f"{value!r} is not a label value (at most 63 letters, digits, '-', '_' or '.', alphanumeric at the ends)"
    return None


def _labels(labels: Any, base: str) -> Problems:
    if not isinstance(labels, Mapping):
        return []
    problems = [(f"{base}.{key}", error) for key in labels if (error := _qualified_name(str(key)))]
    problems += [
        (f"{base}.{key}", error)
        for key, value in labels.items()
        if isinstance(value, str) and (error := _label_value(value))
    ]
    return problems


def check_volume(ref: VolumeRef, base: str) -> Problems:
    """A volume source as a Pod volume would hold it (one with other than one key is reported elsewhere)."""
    if ref.source is None or len(ref.source) != 1:
        return []
    return _schema_problems("io.k8s.api.core.v1.Volume", {"name": "volume", **ref.source}, f"{base}.source")


def _check_toleration(toleration: Mapping[str, Any], base: str) -> Problems:
    problems: Problems = []
    key, operator, effect = toleration.get("key"), toleration.get("operator"), toleration.get("effect")
    value = toleration.get("value")
    if isinstance(key, str) and key and (error := _qualified_name(key)):
        problems.append((f"{base}.key", error))
    if operator is not None and operator not in _TOLERATION_OPERATORS:
        problems.append((f"{base}.operator", f"{operator!r} is not one of {', '.join(_TOLERATION_OPERATORS)}"))
    if effect not in (None, "", *_TAINT_EFFECTS):
        problems.append((f"{base}.effect", f"{effect!r} is not one of {', '.join(_TAINT_EFFECTS)} (or empty)"))
    if not key and operator != "Exists":
        problems.append((f"{base}.operator", "must be Exists when key is empty (tolerate every taint)"))
    if operator == "Exists" and value:
        problems.append((f"{base}.value", "must be empty when operator is Exists"))
    if toleration.get("tolerationSeconds") is not None and effect != "NoExecute":
        problems.append((f"{base}.tolerationSeconds", "only applies to effect NoExecute"))
    return problems


def _check_affinity(node: Any, base: str, *, operators: tuple[str, ...] = _LABEL_SELECTOR_OPERATORS) -> Problems:
    """Selector rules anywhere inside an affinity: operators, label keys and values, weights."""
    problems: Problems = []
    if isinstance(node, list):
        for index, item in enumerate(node):
            problems += _check_affinity(item, f"{base}[{index}]", operators=operators)
        return problems
    if not isinstance(node, Mapping):
        return problems
    for name, item in node.items():
        where = f"{base}.{name}"
        if name == "nodeAffinity":
            problems += _check_affinity(item, where, operators=_NODE_SELECTOR_OPERATORS)
        elif name == "matchExpressions" and isinstance(item, list):
            for index, requirement in enumerate(item):
                if not isinstance(requirement, Mapping):
                    continue
                at = f"{where}[{index}]"
                if isinstance(requirement.get("key"), str) and (error := _qualified_name(requirement["key"])):
                    problems.append((f"{at}.key", error))
                if requirement.get("operator") not in operators:
                    operator = requirement.get("operator")
                    problems.append((f"{at}.operator", f"{operator!r} is not one of {', '.join(operators)}"))
        elif name == "matchLabels":
            problems += _labels(item, where)
        elif name == "weight" and isinstance(item, int) and not 1 <= item <= 100:
            problems.append((where, f"{item} is not between 1 and 100"))
        else:
            problems += _check_affinity(item, where, operators=operators)
    return problems


def _check_spread(constraints: list[dict[str, Any]], base: str) -> Problems:
    """What Kubernetes' Go validation adds to the schema of topologySpreadConstraints: a positive maxSkew, a label
    name as topologyKey, a known whenUnsatisfiable, no two constraints with the same (topologyKey,
    whenUnsatisfiable) (the list's merge key: server-side apply refuses duplicates), and a valid labelSelector."""
    problems: Problems = []
    seen: set[tuple[Any, Any]] = set()
    for index, constraint in enumerate(constraints):
        at = f"{base}[{index}]"
        found = _schema_problems("io.k8s.api.core.v1.TopologySpreadConstraint", constraint, at)
        if found:
            problems += found
            continue
        skew, key, action = constraint["maxSkew"], constraint["topologyKey"], constraint["whenUnsatisfiable"]
        if skew < 1:
            problems.append((f"{at}.maxSkew", f"{skew} is not greater than zero"))
        if not key:
            problems.append((f"{at}.topologyKey", "must not be empty (a node label such as kubernetes.io/hostname)"))
        elif error := _qualified_name(key):
            problems.append((f"{at}.topologyKey", error))
        if action not in _UNSATISFIABLE_ACTIONS:
            problems.append(
                (f"{at}.whenUnsatisfiable", f"{action!r} is not one of {', '.join(_UNSATISFIABLE_ACTIONS)}")
            )
        if constraint.get("minDomains") is not None and action != "DoNotSchedule":
            problems.append((f"{at}.minDomains", "only applies to whenUnsatisfiable DoNotSchedule"))
        if (key, action) in seen:
            problems.append((at, f"a second constraint for topologyKey {key!r} and whenUnsatisfiable {action!r}"))
        seen.add((key, action))
        problems += _check_affinity(constraint.get("labelSelector"), f"{at}.labelSelector")
    return problems


def check_scheduling(scheduling: Scheduling, base: str) -> Problems:
    problems = _labels(scheduling.node_selector, f"{base}.nodeSelector")
    for index, toleration in enumerate(scheduling.tolerations):
        where = f"{base}.tolerations[{index}]"
        found = _schema_problems("io.k8s.api.core.v1.Toleration", toleration, where)
        problems += found or _check_toleration(toleration, where)
    if scheduling.affinity is not None:
        where = f"{base}.affinity"
        problems += _schema_problems("io.k8s.api.core.v1.Affinity", scheduling.affinity, where)
        problems += _check_affinity(scheduling.affinity, where)
    if scheduling.topology_spread_constraints:
        problems += _check_spread(scheduling.topology_spread_constraints, f"{base}.topologySpreadConstraints")
    problems += _labels(scheduling.pod_labels, f"{base}.podLabels")
    problems += check_annotations(scheduling.pod_annotations, f"{base}.podAnnotations")
    for field, keys in (("podLabels", scheduling.pod_labels), ("podAnnotations", scheduling.pod_annotations)):
        problems += [(_field(f"{base}.{field}", key), f"{key!r} is {RESERVED_WHY}") for key in keys if reserved(key)]
    return problems


def check_resources(resources: ResourceRequirements, base: str) -> Problems:
    """Resource names as Kubernetes spells them, requests within limits, extended resources not overcommitted."""
    problems: Problems = []
    for kind in ("requests", "limits"):
        for name in getattr(resources, kind):
            if "/" not in name and not _NATIVE_RESOURCES.fullmatch(name):
                problems.append((f"{base}.{kind}.{name}", f"{name!r} is not a Kubernetes resource name"))
            elif "/" in name and (error := _qualified_name(name)):
                problems.append((f"{base}.{kind}.{name}", error))
    for name, request in resources.requests.items():
        limit = resources.limits.get(name)
        if limit is None:
            continue
        low, high = _number(request), _number(limit)
        if low is None or high is None:
            continue
        if low > high:
            problems.append((f"{base}.requests.{name}", f"{request} is more than the limit {limit}"))
        elif "/" in name and not name.startswith("kubernetes.io/") and low != high:
            problems.append(
                (f"{base}.requests.{name}", f"an extended resource's request must equal its limit ({limit})")
            )
    return problems


def _number(quantity: int | str) -> Decimal | None:
    try:
        return parse_quantity(quantity)
    except ValueError:
        return None


def check_annotations(annotations: Mapping[str, str], base: str) -> Problems:
    problems = [(_field(base, key), error) for key in annotations if (error := _qualified_name(key))]
    size = sum(len(key.encode()) + len(value.encode()) for key, value in annotations.items())
    if size > MAX_ANNOTATIONS_BYTES:
        problems.append((base, f"{size} bytes of annotations, more than Kubernetes' {MAX_ANNOTATIONS_BYTES}"))
    return problems


def check_passthrough(spec: SlurmClusterSpec, path: str = "spec") -> Problems:
    """Every problem in the Kubernetes objects the spec passes through to pods and Services, by field path."""
    problems = check_volume(spec.jail.volume, f"{path}.jail.volume")
    for index, mount in enumerate(spec.jail.sub_mounts):
        problems += check_volume(mount.volume, f"{path}.jail.subMounts[{index}].volume")
    for base, scheduling, resources in spec.components_with_pods(path):
        problems += check_scheduling(scheduling, base)
        problems += check_resources(resources, f"{base}.resources")
    if spec.accounting.mariadb is not None:
        problems += check_resources(spec.accounting.mariadb.resources, f"{path}.accounting.mariadb.resources")
    problems += check_annotations(spec.login.service.annotations, f"{path}.login.service.annotations")
    return problems
