"""`spec.identity`: who exists on the cluster besides the jail's own account files.

- `users` and `groups`: declared accounts the operator writes into the jail's account files (which every daemon reads
  through libnss-extrausers), with their homes and SSH keys. Users made by hand in the jail (`useradd` there) keep
  working beside them: the operator changes only the entries it made, and refuses a declared entry whose name or id
  an existing one already has (reported, never overwritten).
- `directory`: an LDAP directory (OpenLDAP, Active Directory, FreeIPA) every node resolves through SSSD: sshd on the
  login nodes, slurmctld, slurmd and its step daemons, and the processes of sessions and jobs inside the jail; users
  log in with the directory's password or its SSH keys (docs/identity-directory.md). Without it nothing of SSSD runs.

docs/users.md says how to choose between the identity sources.
"""

from __future__ import annotations

from typing import Annotated, Final, Literal

from pydantic import ConfigDict, Field, StringConstraints

from .cel import Rule, validations
from .fields import LIST_MAP_BY_NAME, LIST_SET
from .types import DATA_KEY_PATTERN, DNS_SUBDOMAIN_PATTERN, ApiModel, SecretKeyRef

MAX_DIRECTORY_URIS = 8
MAX_URI_LENGTH = 512
MAX_DN_LENGTH = 1024
MAX_FILTER_LENGTH = 1024
# An LDAP URI the way SSSD's ldap_uri takes it: scheme, host (a name, an IPv4 address or a bracketed IPv6 one) and an
# optional port; no DN, attributes or filter after it (SSSD ignores them, so they would only mislead).
URI_PATTERN = r"^ldaps?://([A-Za-z0-9]([-A-Za-z0-9.]*[A-Za-z0-9])?|\[[0-9A-Fa-f:.]+\])(:[0-9]{1,5})?/?$"
# What a filter must look like to the API server: one parenthesised expression, no line break (sssd.conf is a
# line-oriented file: a newline would start a setting of its own).
FILTER_RULE = "self.startsWith('(') && self.endsWith(')') && !self.contains('\\n') && !self.contains('\\r')"
FILTER_MESSAGE = "an LDAP filter is one parenthesised expression on one line, e.g. (objectClass=posixAccount)"
# A DN is one line of text too, for the same reason.
ONE_LINE_RULE = "!self.contains('\\n') && !self.contains('\\r')"
ONE_LINE_MESSAGE = "must be one line"


# The ids useradd and groupadd hand out to people (Debian's login.defs UID_MIN..UID_MAX, GID_MIN..GID_MAX): below
# are root and the system accounts, above are nobody (65534) and the ranges containers map.
MIN_ID: Final = 1000
MAX_ID: Final = 60000
MAX_USERS: Final = 256
MAX_GROUPS: Final = 128
MAX_GROUPS_PER_USER: Final = 16
MAX_KEYS_PER_USER: Final = 32
DEFAULT_SHELL: Final = "/bin/bash"
HOME_PARENT: Final = "/home"
# POSIX names as useradd accepts them by default, lower case, no trailing "$" (machine accounts).
POSIX_NAME_PATTERN: Final = r"^[a-z_][a-z0-9_-]*$"
# An absolute path of plain segments: no "." or "..", no ":" (the passwd field separator), no whitespace.
ABSOLUTE_PATH_PATTERN: Final = r"^(/[A-Za-z0-9_][A-Za-z0-9._-]*)+$"
# One line of an authorized_keys file: options (optional), key type, key, comment; no control characters.
AUTHORIZED_KEY_PATTERN: Final = r"^[^\x00-\x1f\x7f]+$"

PosixName = Annotated[str, StringConstraints(min_length=1, max_length=32, pattern=POSIX_NAME_PATTERN)]
PosixId = Annotated[int, Field(ge=MIN_ID, le=MAX_ID)]
AbsolutePath = Annotated[str, StringConstraints(max_length=256, pattern=ABSOLUTE_PATH_PATTERN)]
AuthorizedKey = Annotated[str, StringConstraints(min_length=1, max_length=8192, pattern=AUTHORIZED_KEY_PATTERN)]


Uri = Annotated[str, StringConstraints(max_length=MAX_URI_LENGTH, pattern=URI_PATTERN)]


class ConfigMapKeyRef(ApiModel):
    """A key of a ConfigMap in the SlurmCluster's namespace."""

    name: str = Field(
        min_length=1,
        max_length=253,
        pattern=DNS_SUBDOMAIN_PATTERN,
        description="Name of the ConfigMap (a DNS subdomain), in the SlurmCluster's namespace.",
    )
    key: str = Field(
        "ca.crt", min_length=1, max_length=253, pattern=DATA_KEY_PATTERN, description="Key that holds the value."
    )


class CaRef(ApiModel):
    """PEM certificates of the certificate authorities the directory's server certificate is checked against."""

    model_config = ConfigDict(
        json_schema_extra=validations(
            Rule(
                "has(self.configMapKeyRef) != has(self.secretKeyRef)",
                message="set exactly one of configMapKeyRef and secretKeyRef",
            )
        )
    )

    config_map_key_ref: ConfigMapKeyRef | None = Field(None, description="A ConfigMap key holding the PEM bundle.")
    secret_key_ref: SecretKeyRef | None = Field(None, description="A Secret key holding the PEM bundle.")


def _one_line(max_length: int, description: str, *, alias: str) -> str | None:
    return Field(
        None,
        alias=alias,
        min_length=1,
        max_length=max_length,
        description=description,
        json_schema_extra=validations(Rule(ONE_LINE_RULE, message=ONE_LINE_MESSAGE)),
    )


def _filter(description: str) -> str | None:
    return Field(
        None,
        min_length=2,
        max_length=MAX_FILTER_LENGTH,
        description=description,
        json_schema_extra=validations(Rule(FILTER_RULE, message=FILTER_MESSAGE)),
    )


class Directory(ApiModel):
    """An LDAP directory (RFC 2307 / rfc2307bis schema: posixAccount, posixGroup; ldapPublicKey for SSH keys) that
    every node resolves users and groups from, through SSSD. It is always reached over TLS: ldaps:// URIs, or
    ldap:// ones with startTLS."""

    model_config = ConfigDict(
        json_schema_extra=validations(
            Rule(
                "has(self.bindDN) == has(self.bindPasswordSecretRef)",
                message="bindDN and bindPasswordSecretRef go together (both empty: anonymous binds)",
                field_path=".bindPasswordSecretRef",
            ),
            Rule(
                "self.startTLS || self.uris.all(u, u.startsWith('ldaps://'))",
                message="the directory is reached over TLS: every URI is ldaps://, or startTLS is true",
                field_path=".uris",
            ),
            Rule(
                "!self.startTLS || self.uris.all(u, u.startsWith('ldap://'))",
                message="startTLS is for ldap:// URIs (ldaps:// is TLS from the start)",
                field_path=".startTLS",
            ),
        )
    )

    uris: list[Uri] = Field(
        min_length=1,
        max_length=MAX_DIRECTORY_URIS,
        description="Servers of the directory, tried in order: ldaps://host[:port] (or ldap:// with startTLS).",
    )
    base_dn: str = Field(
        alias="baseDN",
        min_length=1,
        max_length=MAX_DN_LENGTH,
        description="Where users and groups are searched, e.g. dc=example,dc=com.",
        json_schema_extra=validations(Rule(ONE_LINE_RULE, message=ONE_LINE_MESSAGE)),
    )
    bind_dn: str | None = _one_line(
        MAX_DN_LENGTH, "DN SSSD binds as to search; empty means anonymous binds.", alias="bindDN"
    )
    bind_password_secret_ref: SecretKeyRef | None = Field(
        None, description="The bind DN's password: a Secret key (key defaults to 'password')."
    )
    ca: CaRef | None = Field(
        None, description="Certificate authorities for the server's certificate; empty means the image's system CAs."
    )
    start_tls: bool = Field(
        False, alias="startTLS", description="Upgrade ldap:// connections with StartTLS (required for ldap://)."
    )
    schema_: Literal["rfc2307", "rfc2307bis", "ad"] = Field(
        "rfc2307",
        alias="schema",
        description="How groups name their members: rfc2307 (memberUid: OpenLDAP's nis schema), rfc2307bis (member "
        "DNs: FreeIPA, OpenLDAP with rfc2307bis) or ad (Active Directory with POSIX attributes).",
    )
    user_filter: str | None = _filter(
        "Extra LDAP filter users must match, e.g. (memberOf=cn=hpc,ou=groups,dc=example,dc=com)."
    )
    group_filter: str | None = _filter("Extra LDAP filter groups must match.")


class GroupSpec(ApiModel):
    """A group in the jail's /etc/group."""

    name: PosixName = Field(description="Group name (lower case POSIX name).")
    gid: PosixId = Field(description=f"Group id, {MIN_ID}..{MAX_ID}; unique among the declared groups.")


class UserSpec(ApiModel):
    """A user in the jail's /etc/passwd and /etc/shadow, with a home and SSH keys. Removing it from the list locks
    the account (no login) and keeps its home and files."""

    name: PosixName = Field(description="User name (lower case POSIX name).")
    uid: PosixId = Field(description=f"User id, {MIN_ID}..{MAX_ID}; unique among the declared users.")
    gid: PosixId | None = Field(
        None,
        description="Primary group: the gid of a group in spec.identity.groups. Empty: a group of the user's own, "
        "named as the user, with gid = uid.",
    )
    groups: list[PosixName] = Field(
        default_factory=list,
        max_length=MAX_GROUPS_PER_USER,
        description="Supplementary groups, each one of spec.identity.groups.",
        json_schema_extra=LIST_SET,
    )
    shell: AbsolutePath = Field(DEFAULT_SHELL, description="Login shell (a path in the jail).")
    home: AbsolutePath | None = Field(
        None, description=f"Home directory in the jail; empty means {HOME_PARENT}/<name>. Created once, never deleted."
    )
    ssh_authorized_keys: list[AuthorizedKey] = Field(
        default_factory=list,
        max_length=MAX_KEYS_PER_USER,
        alias="sshAuthorizedKeys",
        description="Public keys (authorized_keys lines) that may log in as this user on the login nodes.",
    )

    @property
    def home_dir(self) -> str:
        return self.home or f"{HOME_PARENT}/{self.name}"

    @property
    def primary_gid(self) -> int:
        """The gid of the user's primary group: the declared one, else that of the user's own group (= uid)."""
        return self.uid if self.gid is None else self.gid


class Identity(ApiModel):
    """Users and groups the operator declares in the jail. Entries made by hand in the jail are never changed; one
    whose name or id a declared entry also wants is kept, and the declared one is refused (IdentitySynced)."""

    # Across the two lists, on the node that sees both (the API server names the list at fault, validation.py the
    # item). Bounded: MAX_USERS x MAX_GROUPS comparisons at most.
    model_config = ConfigDict(
        json_schema_extra=validations(
            Rule(
                "!has(self.users) || self.users.all(u, !has(u.gid) || "
                "(has(self.groups) && self.groups.exists(g, g.gid == u.gid)))",
                message="a user's gid is the gid of a group in spec.identity.groups (or empty: a group of its own)",
                field_path=".users",
            ),
            Rule(
                "!has(self.users) || self.users.all(u, !has(u.groups) || "
                "(has(self.groups) && sets.contains(self.groups.map(g, g.name), u.groups)))",
                message="a user's groups are groups of spec.identity.groups",
                field_path=".users",
            ),
            Rule(
                "!has(self.users) || !has(self.groups) || "
                "self.users.all(u, has(u.gid) || !self.groups.exists(g, g.name == u.name || g.gid == u.uid))",
                message="a user without gid gets a group of its own (its name, gid = uid): no group of "
                "spec.identity.groups may have that name or gid",
                field_path=".users",
            ),
        )
    )

    users: list[UserSpec] = Field(
        default_factory=list,
        max_length=MAX_USERS,
        description="Users; names and uids are unique.",
        json_schema_extra={
            **LIST_MAP_BY_NAME,
            **validations(
                Rule("self.all(u, self.exists_one(v, v.uid == u.uid))", message="two users have the same uid")
            ),
        },
    )
    groups: list[GroupSpec] = Field(
        default_factory=list,
        max_length=MAX_GROUPS,
        description="Groups; names and gids are unique.",
        json_schema_extra={
            **LIST_MAP_BY_NAME,
            **validations(
                Rule("self.all(g, self.exists_one(h, h.gid == g.gid))", message="two groups have the same gid")
            ),
        },
    )
    directory: Directory | None = Field(
        None, description="An LDAP directory every node resolves users and groups from (SSSD); empty means none."
    )


def filter_problem(value: str) -> str | None:
    """Why `value` is not a filter SSSD can take, or None; checks parentheses balance too (which CEL cannot)."""
    if not (value.startswith("(") and value.endswith(")")) or "\n" in value or "\r" in value:
        return FILTER_MESSAGE
    # RFC 4515: a parenthesis inside a value is escaped as \28 or \29, so every literal one is structure.
    depth = 0
    for index, char in enumerate(value):
        if char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
            if depth < 0:
                return "unbalanced parentheses: a ')' closes nothing"
            if depth == 0 and index != len(value) - 1:
                return "more than one expression: combine them with (&...) or (|...)"
    return None if depth == 0 else "unbalanced parentheses: a '(' is never closed"
