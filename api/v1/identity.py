"""`spec.identity`: who exists in the jail. Declared users and groups the operator writes into the jail's account
files (which every daemon reads through libnss-extrausers), with their homes and SSH keys.

Users made by hand in the jail (`useradd` there) keep working beside them: the operator changes only the entries it
made, and refuses a declared entry whose name or id an existing one already has (reported, never overwritten).
docs/users.md says how to choose between the identity sources.
"""

from __future__ import annotations

from typing import Annotated, Final

from pydantic import ConfigDict, Field, StringConstraints

from .cel import Rule, validations
from .fields import LIST_MAP_BY_NAME, LIST_SET
from .types import ApiModel

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
