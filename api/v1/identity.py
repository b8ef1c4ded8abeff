"""`spec.identity`: where the cluster's users and groups come from besides the jail's own account files.

`directory` points every node at an LDAP directory (OpenLDAP, Active Directory, FreeIPA) through SSSD: sshd on the
login nodes, slurmctld, slurmd and its step daemons, and the processes of sessions and jobs inside the jail resolve
the directory's users and groups, and users log in with the directory's password or its SSH keys
(docs/identity-directory.md). Without it nothing of SSSD runs.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import ConfigDict, Field, StringConstraints

from .cel import Rule, validations
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
    start_tls: bool = Field(False, alias="startTLS", description="Upgrade ldap:// connections with StartTLS (required for ldap://).")
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


class Identity(ApiModel):
    """Where users and groups come from besides the jail's /etc/passwd and /etc/group."""

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
