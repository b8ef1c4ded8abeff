"""Every cross-field rule the API server enforces on a SlurmCluster, each with a spec that breaks it.

One table for two suites: test/e2e/test_api_cel.py sends each spec to a real API server and expects a 422 naming
`field` and saying `server_says`; test/unit/api/test_cel.py runs the operator's own validation on the same spec and
expects a Problem on that field (or inside it) saying `operator_says`. Together they show that the API server and
the operator refuse the same specs for the same reason, so that the operator's check is a true second line for a CRD
installed without the rules. The unit suite also checks that every rule in the CRD has a row here.

`by` says what in the CRD refuses the spec: a CEL rule (`x-kubernetes-validations`, then `rule` is that rule's
`message`, which identifies it), the list-map keys of a named list, a list-set, or a schema bound (min/maxProperties).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any, Literal

from slurmctl.api.v1.types import RESERVED_WHY

By = Literal["cel", "list-map", "list-set", "schema"]

VALID_SPEC: dict[str, Any] = {"jail": {"volume": {"claimName": "jail"}}, "workers": [{"name": "cpu", "size": 2}]}
_EXTERNAL = {"host": "db.example.com", "user": "slurm", "passwordSecretRef": {"name": "db"}}
_NFS = {"nfs": {"server": "nfs.example.com", "path": "/jail"}}
_DIRECTORY = {"uris": ["ldaps://ldap.example.com"], "baseDN": "dc=example,dc=com"}


def _directory(**fields: Any) -> dict[str, Any]:
    return {"identity": {"directory": {**_DIRECTORY, **fields}}}


def _accounting(**fields: Any) -> dict[str, Any]:
    return {"accounting": {"enabled": True, "external": _EXTERNAL, **fields}}


def _identity(users: list[dict[str, Any]], groups: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    return {"identity": {"users": users, **({"groups": groups} if groups is not None else {})}}


_RESEARCH = [{"name": "research", "gid": 3000}]


def _sub_mounts(*mounts: tuple[str, str, dict[str, Any]]) -> dict[str, Any]:
    return {
        "jail": {
            "volume": {"claimName": "jail"},
            "subMounts": [{"name": name, "mountPath": path, "volume": volume} for name, path, volume in mounts],
        }
    }


# Every component that has pods (SlurmClusterSpec.components_with_pods), and a key of slurmctl's for each of the
# fields that may not name one.
_PODS = ("populateJail", "controller", "workers[0]", "login", "accounting", "rest", "healthChecks.ncclBenchmark")
_RESERVED = {
    "podLabels": {"app.kubernetes.io/instance": "other"},
    "podAnnotations": {"container.apparmor.security.beta.kubernetes.io/sshd": "unconfined"},
}


def _in_component(where: str, field: str, value: Any) -> dict[str, Any]:
    """A patch that sets `field` of the component at `where` (a path below spec) to `value`."""
    if where == "workers[0]":
        return {"workers": [{"name": "cpu", "size": 2, field: value}]}
    outer, _, inner = where.partition(".")
    return {outer: {inner: {field: value}}} if inner else {outer: {field: value}}


# A spec every rule holds for, touching each rule's field: what the rules must let through.
RICH_VALID_SPEC: dict[str, Any] = {
    "jail": {
        "volume": {"source": _NFS},
        "subMounts": [
            {"name": "data", "mountPath": "/data", "volume": {"claimName": "data"}},
            {"name": "scratch", "mountPath": "/scratch", "volume": {"source": {"emptyDir": {}}}},
        ],
    },
    "workers": [
        {"name": "cpu", "size": 2, "features": ["epyc"]},
        {"name": "gpu", "gpus": 8, "autoscale": {"min": 4, "max": 4}},
    ],
    "partitions": [{"name": "main", "default": True}, {"name": "gpu", "workers": ["gpu"]}],
    "login": {
        "service": {
            "type": "LoadBalancer",
            "nodePort": 30022,
            "loadBalancerIP": "192.0.2.10",
            "loadBalancerSourceRanges": ["192.0.2.0/24"],
        }
    },
    "accounting": {
        "enabled": True,
        "external": _EXTERNAL,
        "qos": [{"name": "small"}],
        "accounts": [
            {
                "name": "physics",
                "parent": "science",
                "users": ["alice"],
                "qos": ["small", "normal"],
                "defaultQos": "small",
            },
            {"name": "science", "defaultQos": "small"},
        ],
    },
    "healthChecks": {"ncclBenchmark": {"enabled": True}},
    "identity": {
        "groups": [{"name": "research", "gid": 3000}, {"name": "staff", "gid": 3001}],
        "users": [
            {
                "name": "alice",
                "uid": 2000,
                "groups": ["research", "staff"],
                "sshAuthorizedKeys": ["ssh-ed25519 AAAA a"],
            },
            {"name": "bob", "uid": 2001, "gid": 3000, "home": "/home/b/bob", "shell": "/bin/sh"},
        ],
        "directory": {
            "uris": ["ldap://ldap1.example.com:389", "ldap://[2001:db8::1]"],
            "baseDN": "dc=example,dc=com",
            "bindDN": "cn=sssd,dc=example,dc=com",
            "bindPasswordSecretRef": {"name": "ldap-bind"},
            "ca": {"configMapKeyRef": {"name": "ldap-ca"}},
            "startTLS": True,
            "schema": "rfc2307bis",
            "userFilter": "(&(objectClass=posixAccount)(memberOf=cn=hpc,ou=groups,dc=example,dc=com))",
            "groupFilter": "(objectClass=posixGroup)",
        },
    },
    "maintenance": {
        "windows": [
            {"schedule": "0 2 * * 6", "duration": "4h"},
            {"start": "2026-12-24T22:00:00Z", "end": "2026-12-25T02:00:00Z"},
        ]
    },
}


@dataclass(frozen=True)
class Case:
    """A spec (VALID_SPEC with `patch`'s top-level fields replaced) that breaks one rule."""

    name: str
    patch: dict[str, Any]
    by: By
    field: str  # the path the API server's refusal names
    server_says: str
    operator_says: str | None  # None: only the API server checks it (the operator has no check of its own)
    rule: str | None = None  # for `cel`, the rule's message (its identity in the CRD)

    @property
    def spec(self) -> dict[str, Any]:
        return {**copy.deepcopy(VALID_SPEC), **copy.deepcopy(self.patch)}


CASES: tuple[Case, ...] = (
    Case(
        "elastic min above max",
        {"workers": [{"name": "cpu", "autoscale": {"min": 5, "max": 3}}]},
        "cel",
        "spec.workers[0].autoscale.min",
        "min is more than max",
        "min 5 is more than max 3",
        rule="min is more than max",
    ),
    Case(
        "more worker nodes than the maximum",
        {"workers": [{"name": f"g{index}", "size": 1000} for index in range(17)]},
        "cel",
        "spec.workers",
        "worker nodes in total (size, or autoscale.max, of every group) exceed the maximum of 16384",
        "17000 worker nodes in total exceed the maximum of 16384",
        rule="worker nodes in total (size, or autoscale.max, of every group) exceed the maximum of 16384",
    ),
    Case(
        "elastic group without slurmrestd",
        {"workers": [{"name": "cpu", "autoscale": {"max": 4}}], "rest": {"enabled": False}},
        "cel",
        "spec.workers",
        "an elastic group needs slurmrestd (spec.rest.enabled): it follows Slurm's power states",
        "an elastic group needs slurmrestd (spec.rest.enabled): it follows Slurm's power states",
        rule="an elastic group needs slurmrestd (spec.rest.enabled): it follows Slurm's power states",
    ),
    Case(
        "elastic group with a topology",
        {"workers": [{"name": "cpu", "autoscale": {"max": 4}}], "topology": {"block": {"label": "example.com/block"}}},
        "cel",
        "spec.workers",
        "an elastic group cannot be combined with spec.topology yet",
        "an elastic group cannot be combined with spec.topology yet",
        rule="an elastic group cannot be combined with spec.topology yet (its powered-down nodes have no place in "
        "topology.conf)",
    ),
    Case(
        "no default partition",
        {"partitions": [{"name": "a"}, {"name": "b"}]},
        "cel",
        "spec.partitions",
        "no partition has default: true (exactly one must)",
        "no partition has default: true (exactly one must)",
        rule="exactly one partition has default: true",
    ),
    Case(
        "two default partitions",
        {"partitions": [{"name": "a", "default": True}, {"name": "b", "default": True}]},
        "cel",
        "spec.partitions",
        "more than one default partition (exactly one must)",
        "more than one default partition",
        rule="exactly one partition has default: true",
    ),
    Case(
        "partition named default",
        {"partitions": [{"name": "default", "default": True}]},
        "cel",
        "spec.partitions[0].name",
        'Slurm reserves "default"',
        'Slurm reserves "default"',
        rule='Slurm reserves "default" (PartitionName=DEFAULT sets defaults for every partition); choose another name',
    ),
    Case(
        "partition naming an unknown group",
        {"partitions": [{"name": "main", "default": True, "workers": ["cpu", "gpu"]}]},
        "cel",
        "spec.partitions",
        "unknown worker group in partitions[].workers: each is a group of spec.workers",
        'unknown worker group "gpu"',
        rule="unknown worker group in partitions[].workers: each is a group of spec.workers",
    ),
    Case(
        "jail volume with neither claim nor source",
        {"jail": {"volume": {}}},
        "cel",
        "spec.jail.volume",
        "set exactly one of claimName and source (got neither)",
        "set exactly one of claimName and source (got neither)",
        rule="set exactly one of claimName and source",
    ),
    Case(
        "jail volume with claim and source",
        {"jail": {"volume": {"claimName": "jail", "source": _NFS}}},
        "cel",
        "spec.jail.volume",
        "set exactly one of claimName and source (got claimName, source)",
        "set exactly one of claimName and source (got claimName, source)",
        rule="set exactly one of claimName and source",
    ),
    Case(
        "sub-mount volume with neither claim nor source",
        _sub_mounts(("scratch", "/scratch", {})),
        "cel",
        "spec.jail.subMounts[0].volume",
        "set exactly one of claimName and source (got neither)",
        "set exactly one of claimName and source (got neither)",
        rule="set exactly one of claimName and source",
    ),
    Case(
        "one path mounted twice",
        _sub_mounts(("a", "/scratch", {"claimName": "a"}), ("b", "/scratch", {"claimName": "b"})),
        "cel",
        "spec.jail.subMounts",
        "a mountPath is mounted twice (by two sub-mounts)",
        "/scratch is mounted twice",
        rule="a mountPath is mounted twice (by two sub-mounts)",
    ),
    Case(
        "node port on a ClusterIP service",
        {"login": {"service": {"nodePort": 30022}}},
        "cel",
        "spec.login.service.nodePort",
        "needs type NodePort or LoadBalancer",
        "needs type NodePort or LoadBalancer",
        rule="needs type NodePort or LoadBalancer",
    ),
    Case(
        "load balancer IP on a NodePort service",
        {"login": {"service": {"type": "NodePort", "loadBalancerIP": "192.0.2.10"}}},
        "cel",
        "spec.login.service.loadBalancerIP",
        "needs type LoadBalancer",
        "needs type LoadBalancer",
        rule="needs type LoadBalancer",
    ),
    Case(
        "load balancer source ranges on a ClusterIP service",
        {"login": {"service": {"loadBalancerSourceRanges": ["192.0.2.0/24"]}}},
        "cel",
        "spec.login.service.loadBalancerSourceRanges",
        "needs type LoadBalancer",
        "needs type LoadBalancer",
        rule="needs type LoadBalancer",
    ),
    Case(
        "accounting without a database",
        {"accounting": {"enabled": True}},
        "cel",
        "spec.accounting",
        "accounting is enabled but neither external nor mariadb.enabled is set",
        "accounting is enabled but neither external nor mariadb.enabled is set",
        rule="accounting is enabled but neither external nor mariadb.enabled is set",
    ),
    Case(
        "accounting with two databases",
        _accounting(mariadb={"enabled": True}),
        "cel",
        "spec.accounting",
        "set either external or mariadb.enabled, not both",
        "set either external or mariadb.enabled, not both",
        rule="set either external or mariadb.enabled, not both",
    ),
    Case(
        "accounts without accounting",
        {"accounting": {"accounts": [{"name": "physics"}]}},
        "cel",
        "spec.accounting",
        "accounts and qos need accounting: set enabled: true",
        "accounts and qos need accounting: set enabled: true",
        rule="accounts and qos need accounting: set enabled: true",
    ),
    Case(
        "unknown parent account",
        _accounting(accounts=[{"name": "physics", "parent": "science"}]),
        "cel",
        "spec.accounting.accounts",
        "unknown parent account (root or one declared here)",
        'unknown account "science" (root or one declared here)',
        rule="unknown parent account (root or one declared here)",
    ),
    Case(
        "unknown QOS in an account",
        _accounting(qos=[{"name": "small"}], accounts=[{"name": "physics", "qos": ["small", "fast"]}]),
        "cel",
        "spec.accounting.accounts",
        "unknown QOS in accounts[].qos (normal or one declared here)",
        'unknown QOS "fast" (normal or one declared here)',
        rule="unknown QOS in accounts[].qos (normal or one declared here)",
    ),
    Case(
        "default QOS not among the account's",
        _accounting(qos=[{"name": "small"}], accounts=[{"name": "physics", "qos": ["small"], "defaultQos": "normal"}]),
        "cel",
        "spec.accounting.accounts",
        "an account's defaultQos is one of its qos",
        '"normal" is not one of the account\'s qos',
        rule="an account's defaultQos is one of its qos (normal or one declared here if it lists none)",
    ),
    Case(
        "undeclared default QOS",
        _accounting(accounts=[{"name": "physics", "defaultQos": "fast"}]),
        "cel",
        "spec.accounting.accounts",
        "an account's defaultQos is one of its qos",
        '"fast" is not one of the account\'s qos',
        rule="an account's defaultQos is one of its qos (normal or one declared here if it lists none)",
    ),
    Case(
        "account named root",
        _accounting(accounts=[{"name": "root"}]),
        "cel",
        "spec.accounting.accounts[0].name",
        "root is Slurm's own account: it cannot be declared",
        "root is Slurm's own account: it cannot be declared",
        rule="root is Slurm's own account: it cannot be declared",
    ),
    Case(
        "NCCL benchmark without a GPU group",
        {"healthChecks": {"ncclBenchmark": {"enabled": True}}},
        "cel",
        "spec.healthChecks.ncclBenchmark.enabled",
        "the NCCL benchmark needs a worker group with gpus > 0",
        "the NCCL benchmark needs a worker group with gpus > 0",
        rule="the NCCL benchmark needs a worker group with gpus > 0",
    ),
    Case(
        "volume source with two kinds",
        {"jail": {"volume": {"source": {**_NFS, "emptyDir": {}}}}},
        "schema",
        "spec.jail.volume.source",
        "must have at most 1 item",
        "a volume source has exactly one key",
    ),
    Case(
        "maxUnavailable neither a count nor a percentage",
        {"maintenance": {"maxUnavailable": "150%"}},
        "schema",
        "spec.maintenance.maxUnavailable",
        "should match",
        "is neither a count nor a percentage from 1% to 100%",
    ),
    Case(
        "topology with tree and block",
        {"topology": {"tree": {"levels": ["example.com/switch"]}, "block": {"label": "example.com/block"}}},
        "schema",
        "spec.topology",
        "must have at most 1 item",
        "set exactly one of tree and block (got tree, block)",
    ),
    Case(
        "topology with neither tree nor block",
        {"topology": {}},
        "schema",
        "spec.topology",
        "should have at least 1 properties",
        "set exactly one of tree and block (got neither)",
    ),
    Case(
        "two worker groups of one name",
        {"workers": [{"name": "cpu"}, {"name": "cpu"}]},
        "list-map",
        "spec.workers[1]",
        "Duplicate value",
        'duplicate worker group "cpu"',
    ),
    Case(
        "two partitions of one name",
        {"partitions": [{"name": "main", "default": True}, {"name": "main"}]},
        "list-map",
        "spec.partitions[1]",
        "Duplicate value",
        'duplicate partition "main"',
    ),
    Case(
        "two sub-mounts of one name",
        _sub_mounts(("scratch", "/a", {"claimName": "a"}), ("scratch", "/b", {"claimName": "b"})),
        "list-map",
        "spec.jail.subMounts[1]",
        "Duplicate value",
        'duplicate sub-mount "scratch"',
    ),
    Case(
        "two accounts of one name",
        _accounting(accounts=[{"name": "physics"}, {"name": "physics"}]),
        "list-map",
        "spec.accounting.accounts[1]",
        "Duplicate value",
        'duplicate account "physics"',
    ),
    Case(
        "two QOS of one name",
        _accounting(qos=[{"name": "small"}, {"name": "small"}]),
        "list-map",
        "spec.accounting.qos[1]",
        "Duplicate value",
        'duplicate QOS "small"',
    ),
    Case(
        "a group twice in a partition",
        {"partitions": [{"name": "main", "default": True, "workers": ["cpu", "cpu"]}]},
        "list-set",
        "spec.partitions[0].workers[1]",
        "Duplicate value",
        'worker group "cpu" is listed twice',
    ),
    Case(
        "a topology level twice",
        {"topology": {"tree": {"levels": ["example.com/switch", "example.com/switch"]}}},
        "list-set",
        "spec.topology.tree.levels[1]",
        "Duplicate value",
        'label "example.com/switch" is also level 0',
    ),
    Case(
        "a feature twice",
        {"workers": [{"name": "cpu", "features": ["h100", "h100"]}]},
        "list-set",
        "spec.workers[0].features[1]",
        "Duplicate value",
        None,
    ),
    Case(
        "a user twice in an account",
        _accounting(accounts=[{"name": "physics", "users": ["alice", "alice"]}]),
        "list-set",
        "spec.accounting.accounts[0].users[1]",
        "Duplicate value",
        None,
    ),
    *(
        Case(
            f"{field} naming a key of slurmctl's in {where}",
            _in_component(where, field, value),
            "cel",
            f"spec.{where}.{field}",
            f"{field} may not name keys that are slurmctl's own",
            "is slurmctl's own",
            rule=f"{field} may not name keys that are {RESERVED_WHY}",
        )
        for where in _PODS
        for field, value in _RESERVED.items()
    ),
    Case(
        "a QOS twice in an account",
        _accounting(accounts=[{"name": "physics", "qos": ["normal", "normal"]}]),
        "list-set",
        "spec.accounting.accounts[0].qos[1]",
        "Duplicate value",
        None,
    ),
    Case(
        "a maintenance window with a schedule and no duration",
        {"maintenance": {"windows": [{"schedule": "0 2 * * 6"}]}},
        "cel",
        "spec.maintenance.windows[0]",
        "schedule and duration go together (a recurring window)",
        "schedule and duration go together",
        rule="schedule and duration go together (a recurring window)",
    ),
    Case(
        "a maintenance window with a start and no end",
        {"maintenance": {"windows": [{"start": "2026-12-24T22:00:00Z"}]}},
        "cel",
        "spec.maintenance.windows[0]",
        "start and end go together (an absolute window)",
        "start and end go together",
        rule="start and end go together (an absolute window)",
    ),
    Case(
        "a maintenance window both recurring and absolute",
        {
            "maintenance": {
                "windows": [
                    {
                        "schedule": "0 2 * * 6",
                        "duration": "1h",
                        "start": "2026-12-24T22:00:00Z",
                        "end": "2026-12-25T02:00:00Z",
                    }
                ]
            }
        },
        "cel",
        "spec.maintenance.windows[0]",
        "a window is either recurring (schedule and duration) or absolute (start and end)",
        "either recurring",
        rule="a window is either recurring (schedule and duration) or absolute (start and end)",
    ),
    Case(
        "a maintenance window that ends before it starts",
        {"maintenance": {"windows": [{"start": "2026-12-25T02:00:00Z", "end": "2026-12-24T22:00:00Z"}]}},
        "cel",
        "spec.maintenance.windows[0].end",
        "end is not after start",
        "is not after start",
        rule="end is not after start",
    ),
    Case(
        "two users of one uid",
        _identity([{"name": "alice", "uid": 2000}, {"name": "bob", "uid": 2000}]),
        "cel",
        "spec.identity.users",
        "two users have the same uid",
        "uid 2000 is also spec.identity.users[0]'s",
        rule="two users have the same uid",
    ),
    Case(
        "two groups of one gid",
        _identity([], [{"name": "a", "gid": 3000}, {"name": "b", "gid": 3000}]),
        "cel",
        "spec.identity.groups",
        "two groups have the same gid",
        "gid 3000 is also spec.identity.groups[0]'s",
        rule="two groups have the same gid",
    ),
    Case(
        "a user's gid not declared",
        _identity([{"name": "alice", "uid": 2000, "gid": 3001}], _RESEARCH),
        "cel",
        "spec.identity.users",
        "a user's gid is the gid of a group in spec.identity.groups",
        "no group of spec.identity.groups has gid 3001",
        rule="a user's gid is the gid of a group in spec.identity.groups (or empty: a group of its own)",
    ),
    Case(
        "a user in an undeclared group",
        _identity([{"name": "alice", "uid": 2000, "groups": ["research", "video"]}], _RESEARCH),
        "cel",
        "spec.identity.users",
        "a user's groups are groups of spec.identity.groups",
        'unknown group "video"',
        rule="a user's groups are groups of spec.identity.groups",
    ),
    Case(
        "a user's own group clashing with a declared one",
        _identity([{"name": "research", "uid": 2000}], _RESEARCH),
        "cel",
        "spec.identity.users",
        "a user without gid gets a group of its own",
        'group "research" of spec.identity.groups has that name or gid',
        rule="a user without gid gets a group of its own (its name, gid = uid): no group of spec.identity.groups "
        "may have that name or gid",
    ),
    Case(
        "two users of one name",
        _identity([{"name": "alice", "uid": 2000}, {"name": "alice", "uid": 2001}]),
        "list-map",
        "spec.identity.users[1]",
        "Duplicate value",
        'duplicate user "alice"',
    ),
    Case(
        "two groups of one name",
        _identity([], [{"name": "research", "gid": 3000}, {"name": "research", "gid": 3001}]),
        "list-map",
        "spec.identity.groups[1]",
        "Duplicate value",
        'duplicate group "research"',
    ),
    Case(
        "a user in a group twice",
        _identity([{"name": "alice", "uid": 2000, "groups": ["research", "research"]}], _RESEARCH),
        "list-set",
        "spec.identity.users[0].groups[1]",
        "Duplicate value",
        None,
    ),
    Case(
        "a directory bind DN without its password",
        _directory(bindDN="cn=sssd,dc=example,dc=com"),
        "cel",
        "spec.identity.directory.bindPasswordSecretRef",
        "bindDN and bindPasswordSecretRef go together",
        "bindDN and bindPasswordSecretRef go together",
        rule="bindDN and bindPasswordSecretRef go together (both empty: anonymous binds)",
    ),
    Case(
        "a directory reached in clear text",
        _directory(uris=["ldap://ldap.example.com"]),
        "cel",
        "spec.identity.directory.uris",
        "the directory is reached over TLS",
        "the directory is reached over TLS",
        rule="the directory is reached over TLS: every URI is ldaps://, or startTLS is true",
    ),
    Case(
        "startTLS on an ldaps URI",
        _directory(startTLS=True),
        "cel",
        "spec.identity.directory.startTLS",
        "startTLS is for ldap:// URIs",
        "startTLS is for ldap:// URIs",
        rule="startTLS is for ldap:// URIs (ldaps:// is TLS from the start)",
    ),
    Case(
        "a directory CA from both a ConfigMap and a Secret",
        _directory(ca={"configMapKeyRef": {"name": "ca"}, "secretKeyRef": {"name": "ca"}}),
        "cel",
        "spec.identity.directory.ca",
        "set exactly one of configMapKeyRef and secretKeyRef",
        "set exactly one of configMapKeyRef and secretKeyRef",
        rule="set exactly one of configMapKeyRef and secretKeyRef",
    ),
    Case(
        "a directory user filter without parentheses",
        _directory(userFilter="objectClass=posixAccount"),
        "cel",
        "spec.identity.directory.userFilter",
        "an LDAP filter is one parenthesised expression on one line",
        "an LDAP filter is one parenthesised expression on one line",
        rule="an LDAP filter is one parenthesised expression on one line, e.g. (objectClass=posixAccount)",
    ),
    Case(
        "a directory group filter of two expressions on two lines",
        _directory(groupFilter="(cn=a)\n(cn=b)"),
        "cel",
        "spec.identity.directory.groupFilter",
        "an LDAP filter is one parenthesised expression on one line",
        "an LDAP filter is one parenthesised expression on one line",
        rule="an LDAP filter is one parenthesised expression on one line, e.g. (objectClass=posixAccount)",
    ),
    Case(
        "a directory base DN of two lines",
        _directory(baseDN="dc=example,dc=com\nldap_uri = ldap://evil"),
        "cel",
        "spec.identity.directory.baseDN",
        "must be one line",
        "must be one line",
        rule="must be one line",
    ),
    Case(
        "a directory bind DN of two lines",
        _directory(bindDN="cn=a\rdc=b", bindPasswordSecretRef={"name": "ldap-bind"}),
        "cel",
        "spec.identity.directory.bindDN",
        "must be one line",
        "must be one line",
        rule="must be one line",
    ),
)
