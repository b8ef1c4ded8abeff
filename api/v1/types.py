"""Building blocks shared by the spec and status models: the base model, quantities, passthrough objects.

The base model is strict (a string is not an integer, "yes" is not a boolean) because the API server is strict too:
`slurmctl render -f` must reject the same manifests `kubectl apply` would.
"""

from __future__ import annotations

import re
from datetime import timedelta
from decimal import Decimal
from typing import Annotated, Any

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, WithJsonSchema
from pydantic.alias_generators import to_camel

from .cel import Rule, validations

# The regular expression Kubernetes publishes for resource.Quantity (resource.k8s.io openapi), narrowed to what a
# size or a count can be: no minus sign, and an integer exponent of at most two digits ("1e400" and "1e9999999999"
# are refused at `kubectl apply`). Every string it accepts is a valid Kubernetes quantity.
QUANTITY_PATTERN = r"^\+?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?[0-9]{1,2}))?$"
# The largest quantity the API accepts (1Ei): far above any real size or count, and small enough that everything
# rendered from a quantity (RealMemory, CPUs, message sizes) stays a short integer.
MAX_QUANTITY = 2**60
_QUANTITY = re.compile(QUANTITY_PATTERN)
_KUBERNETES_QUANTITY = re.compile(
    r"^(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$"
)
_QUANTITY_PARTS = re.compile(r"([+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+))(.*)")
_BINARY_SUFFIXES = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL_SUFFIXES = {
    "n": Decimal("1e-9"),
    "u": Decimal("1e-6"),
    "m": Decimal("1e-3"),
    "": Decimal(1),
    "k": Decimal("1e3"),
    "M": Decimal("1e6"),
    "G": Decimal("1e9"),
    "T": Decimal("1e12"),
    "P": Decimal("1e15"),
    "E": Decimal("1e18"),
}

# A DNS-1035 label: what Service names need, so every object named after it stays valid.
DNS_LABEL_PATTERN = r"^[a-z]([-a-z0-9]*[a-z0-9])?$"
# A DNS-1123 subdomain: the names of Secrets, PersistentVolumeClaims and StorageClasses.
DNS_SUBDOMAIN_PATTERN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
# A key of a Secret's or ConfigMap's data.
DATA_KEY_PATTERN = r"^[-._a-zA-Z0-9]+$"
NO_WHITESPACE_PATTERN = r"^\S+$"
ABSOLUTE_PATH_PATTERN = r"^/[^\s]*$"


class ApiModel(BaseModel):
    """Base of every API model: camelCase on the wire, snake_case in Python, unknown fields dropped.

    Unknown fields are dropped rather than rejected because the API server prunes them the same way; an operator
    older than its CRD must still read new objects.
    """

    model_config = ConfigDict(
        alias_generator=to_camel,
        validate_by_name=True,
        validate_by_alias=True,
        serialize_by_alias=True,
        strict=True,
        extra="ignore",
    )

    def to_dict(self) -> dict[str, Any]:
        """The wire form: camelCase keys, JSON types, no `None` values (server-side apply bodies carry no nulls)."""
        return self.model_dump(mode="json", by_alias=True, exclude_none=True)


def _check_quantity(value: int | str) -> int | str:
    """Reject what the renderers could not turn into a sane number: malformed, negative, or absurdly large."""
    try:
        number = parse_quantity(value)
    except ValueError:
        if isinstance(value, str) and _KUBERNETES_QUANTITY.fullmatch(value):  # well-formed, but beyond any number
            raise ValueError(f"{value!r} is above the maximum of 1Ei ({MAX_QUANTITY})") from None
        raise ValueError(f"{value!r} is not a Kubernetes quantity (e.g. 500m, 64Gi, 4)") from None
    if number < 0:
        raise ValueError(f"{value!r} is negative; a size or count is 0 or more")
    if number > MAX_QUANTITY:
        raise ValueError(f"{value!r} is above the maximum of 1Ei ({MAX_QUANTITY})")
    if isinstance(value, str) and not _QUANTITY.fullmatch(value):
        raise ValueError(f"{value!r} is not a Kubernetes quantity (e.g. 500m, 64Gi, 4)")
    return value


def parse_quantity(value: int | str) -> Decimal:
    """The numeric value of a Kubernetes quantity ("64Gi" -> 68719476736, "500m" -> 0.5); ValueError if malformed.

    Reads Kubernetes' full syntax (a sign, any exponent) so that it can say what is wrong with a value; the models
    accept only what `Quantity` allows.
    """
    if isinstance(value, int):
        return Decimal(value)
    match = _QUANTITY_PARTS.fullmatch(value) if _KUBERNETES_QUANTITY.fullmatch(value) else None
    if not match:
        raise ValueError(f"{value!r} is not a Kubernetes quantity")
    number, suffix = match.group(1, 2)
    try:
        if suffix in _BINARY_SUFFIXES:
            return Decimal(number) * _BINARY_SUFFIXES[suffix]
        if suffix in _DECIMAL_SUFFIXES:
            return Decimal(number) * _DECIMAL_SUFFIXES[suffix]
        return Decimal(number) * (Decimal(10) ** int(suffix[1:]))
    except (ArithmeticError, ValueError) as exc:  # decimal.Overflow too: exponents are unbounded
        raise ValueError(f"{value!r} is not a Kubernetes quantity") from exc


def _drop_nones(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _drop_nones(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_drop_nones(v) for v in value if v is not None]
    return value


# Not `x-kubernetes-int-or-string`: with that anywhere in a CRD, Kubernetes 1.20's server-side apply cannot convert the
# schema and treats every list as atomic (seen on the test control plane), so list-maps such as status.conditions
# would stop merging per field manager. An untyped node with the quantity pattern accepts the same integers and
# strings; anything else it lets through is reported by the models (validation.check_cluster).
QUANTITY_SCHEMA: dict[str, Any] = {"x-kubernetes-preserve-unknown-fields": True, "pattern": QUANTITY_PATTERN}
Quantity = Annotated[int | str, AfterValidator(_check_quantity), WithJsonSchema(QUANTITY_SCHEMA)]
"""A Kubernetes quantity: an integer or a string such as "500m" or "64Gi"."""

DURATION_PATTERN = r"^([0-9]+h)?([0-9]+m)?([0-9]+s)?$"
_DURATION_PARTS = re.compile(r"([0-9]+)([hms])")
_DURATION_UNITS = {"h": 3600, "m": 60, "s": 1}


def _check_duration(value: str) -> str:
    if not value or not re.fullmatch(DURATION_PATTERN, value):
        raise ValueError(f"{value!r} is not a duration such as 90s, 30m or 1h30m")
    return value


def parse_duration(value: str) -> timedelta:
    return timedelta(seconds=sum(int(n) * _DURATION_UNITS[u] for n, u in _DURATION_PARTS.findall(value)))


DURATION_SCHEMA: dict[str, Any] = {"type": "string", "pattern": DURATION_PATTERN, "minLength": 2}
Duration = Annotated[str, AfterValidator(_check_duration), WithJsonSchema(DURATION_SCHEMA)]
"""A duration in hours, minutes and seconds, as Kubernetes spells them: "90s", "30m", "1h30m"."""

FreeForm = Annotated[
    dict[str, Any],
    AfterValidator(_drop_nones),
    WithJsonSchema({"type": "object", "x-kubernetes-preserve-unknown-fields": True}),
]
"""A Kubernetes object passed through untouched (affinity, a toleration, a volume source); nulls are dropped."""


class ResourceRequirements(ApiModel):
    """Compute resources of a container, as in a Pod spec."""

    requests: dict[str, Quantity] = Field(
        default_factory=dict, description="Minimum resources the container needs, e.g. {cpu: 4, memory: 16Gi}."
    )
    limits: dict[str, Quantity] = Field(
        default_factory=dict, description="Maximum resources the container may use, e.g. {memory: 32Gi}."
    )


# Pod labels and annotations the operator sets or selects on, and the security settings it makes itself: a
# component's podLabels and podAnnotations may not name them (the CRD's rules and validation.py refuse them).
RESERVED_LABELS = (
    "app.kubernetes.io/name",
    "app.kubernetes.io/instance",
    "app.kubernetes.io/component",
    "app.kubernetes.io/managed-by",
)
RESERVED_PREFIXES = (
    "slurm.slurmctl.io/",
    "container.apparmor.security.beta.kubernetes.io/",
    "seccomp.security.alpha.kubernetes.io/",
)
MAX_POD_METADATA = 64  # entries of podLabels, and of podAnnotations


def reserved(key: str) -> bool:
    """A pod label or annotation key the user may not set (the operator's check of the CRD's rule)."""
    return key in RESERVED_LABELS or key.startswith(RESERVED_PREFIXES)


RESERVED_WHY = (
    "slurmctl's own: the labels it selects on (app.kubernetes.io/name, instance, component, managed-by), keys under "
    "slurm.slurmctl.io/, and the AppArmor and seccomp annotations (it sets each pod's security itself)"
)


def _reserved_keys_rule(what: str) -> Rule:
    names = ", ".join(f"'{name}'" for name in RESERVED_LABELS)
    prefixes = " || ".join(f"k.startsWith('{prefix}')" for prefix in RESERVED_PREFIXES)
    return Rule(
        f"self.all(k, !(k in [{names}]) && !({prefixes}))", message=f"{what} may not name keys that are {RESERVED_WHY}"
    )


class Scheduling(ApiModel):
    """Where a component's pods may run and what they carry besides (priority, labels, annotations); mixed into
    every component that has pods."""

    node_selector: dict[str, str] = Field(
        default_factory=dict, description="Node labels the pods require, as in a Pod spec's nodeSelector."
    )
    tolerations: list[FreeForm] = Field(
        default_factory=list, description="Tolerations of the pods, passed through to the Pod spec unchanged."
    )
    affinity: FreeForm | None = Field(
        None,
        description="Affinity of the pods, passed through to the Pod spec. Without podAntiAffinity in it, the "
        "controller and login pods keep their default one (avoid sharing a node with each other); with it, it is "
        "used as given.",
    )
    # `None` (absent, or null, which the API server prunes) and `[]` differ here, unlike in the other lists: absent
    # keeps the component's default (worker groups spread over nodes), `[]` renders none. So no default_factory.
    topology_spread_constraints: list[FreeForm] | None = Field(
        None,
        max_length=16,
        description="Topology spread constraints of the pods, passed through to the Pod spec. Absent: worker groups "
        "spread their pods over nodes (maxSkew 1 per kubernetes.io/hostname, ScheduleAnyway), other components have "
        "none. A list replaces that default; [] turns it off.",
    )
    priority_class_name: str | None = Field(
        None,
        max_length=253,
        pattern=DNS_SUBDOMAIN_PATTERN,
        description="PriorityClass of the pods (it must exist): the scheduler places them before lower ones and may "
        "preempt lower ones to make room.",
    )
    pod_labels: dict[str, str] = Field(
        default_factory=dict,
        description="Labels added to the pods (not to the objects that make them). Changing them re-creates the pods "
        "the way an image change does (workers one drained node at a time).",
        json_schema_extra={"maxProperties": MAX_POD_METADATA, **validations(_reserved_keys_rule("podLabels"))},
    )
    pod_annotations: dict[str, str] = Field(
        default_factory=dict,
        description="Annotations added to the pods, e.g. for a service mesh or a log collector. Changing them "
        "re-creates the pods the way an image change does.",
        json_schema_extra={"maxProperties": MAX_POD_METADATA, **validations(_reserved_keys_rule("podAnnotations"))},
    )


class LocalObjectReference(ApiModel):
    """An object in the SlurmCluster's namespace, by name (a Pod spec's imagePullSecrets item)."""

    name: str = Field(
        min_length=1, max_length=253, pattern=DNS_SUBDOMAIN_PATTERN, description="Name of the object (a Secret)."
    )


class SecretKeyRef(ApiModel):
    """A key of a Secret in the SlurmCluster's namespace."""

    name: str = Field(
        min_length=1,
        max_length=253,
        pattern=DNS_SUBDOMAIN_PATTERN,
        description="Name of the Secret (a DNS subdomain), in the SlurmCluster's namespace.",
    )
    key: str = Field(
        "password",
        min_length=1,
        max_length=253,
        pattern=DATA_KEY_PATTERN,
        description="Key in the Secret's data that holds the value.",
    )


class VolumeRef(ApiModel):
    """A volume given either as an existing claim or as any Kubernetes volume source; exactly one of the two."""

    claim_name: str | None = Field(
        None,
        min_length=1,
        max_length=253,
        pattern=DNS_SUBDOMAIN_PATTERN,
        description="Name of an existing PersistentVolumeClaim in the SlurmCluster's namespace.",
    )
    source: FreeForm | None = Field(
        None,
        description="A Kubernetes volume source with exactly one key, e.g. {nfs: {server: ..., path: ...}}, "
        "passed through unchanged.",
        # The API server cannot look inside a passthrough object, but it can count its keys.
        json_schema_extra={"minProperties": 1, "maxProperties": 1},
    )

    # A rule rather than `oneOf`: the API server's oneOf refusal names neither field.
    model_config = ConfigDict(
        json_schema_extra=validations(
            Rule(
                "has(self.claimName) != has(self.source)",
                message="set exactly one of claimName and source",
                message_expression="'set exactly one of claimName and source (got ' + "
                "(has(self.claimName) ? 'claimName, source' : 'neither') + ')'",
            )
        ),
    )
