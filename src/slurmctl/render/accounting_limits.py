"""What `spec.accounting` declares (QOS, accounts, users' associations), as slurmrestd's /slurmdb/v0.0.42/ bodies,
and which of them differ from what Slurm holds.

Level-based: the desired records are rebuilt from the spec on every reconcile and compared with the live ones field
by field, only over the fields the spec manages. A record that already matches is not sent (0 writes when nothing
changed); a limit the spec no longer sets is sent as "no limit" (a count as infinite, a TRES as -1), so that removing
it from the spec lifts it. Records the spec does not name are never in the output: accounts and QOS created by hand
stay as they are, and nothing here ever deletes.

The shapes follow Slurm 24.11's data_parser v0.0.42: a limit is `{"set", "infinite", "number"}`, a TRES list is
`[{"type", "name", "count"}]` (`gres/gpu` is type gres, name gpu).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from slurmctl.api.v1 import SlurmCluster
from slurmctl.api.v1.limits import AccountSpec, QosSpec
from slurmctl.render import meta

API = "/slurmdb/v0.0.42"
CLEAR_TRES = -1  # a TRES count of -1 removes that TRES from a limit


def limit(value: int | None) -> dict[str, Any]:
    """A 32-bit limit: a number, or infinite (no limit) when the spec sets none."""
    if value is None:
        return {"set": True, "infinite": True, "number": 0}
    return {"set": True, "infinite": False, "number": value}


def tres(limits: Mapping[str, int]) -> list[dict[str, Any]]:
    """`{cpu: 4, gres/gpu: 1}` as Slurm's TRES list, in a stable order."""
    out = []
    for key in sorted(limits):
        kind, _, name = key.partition("/")
        out.append({"type": kind, "name": name, "count": limits[key]})
    return out


def desired_qos(qos: QosSpec) -> dict[str, Any]:
    return {
        "name": qos.name,
        "description": qos.description or qos.name,
        # A priority is a number, not a limit: Slurm keeps "none" as 0 (an infinite one reads back as 0 and would be
        # sent again on every pass).
        "priority": limit(qos.priority or 0),
        "limits": {
            "max": {
                "active_jobs": {"count": limit(qos.grp_jobs)},
                "jobs": {
                    "active_jobs": {"per": {"user": limit(qos.max_jobs_per_user)}},
                    "per": {"user": limit(qos.max_submit_jobs_per_user)},
                },
                "tres": {
                    "total": tres(qos.grp_tres),
                    "per": {"job": tres(qos.max_tres_per_job), "user": tres(qos.max_tres_per_user)},
                },
                "wall_clock": {"per": {"job": limit(qos.max_wall_minutes_per_job)}},
            }
        },
    }


def desired_account(account: AccountSpec) -> dict[str, Any]:
    return {
        "name": account.name,
        "description": account.description or account.name,
        "organization": account.organization or account.name,
    }


def _association(cluster: str, account: AccountSpec, user: str) -> dict[str, Any]:
    """The account's own association (user "") carries the account-wide limits; each user's carries the per-user ones.
    Allowed QOS are set on the account and inherited by its users."""
    assoc: dict[str, Any] = {"cluster": cluster, "account": account.name, "user": user, "partition": ""}
    if not user:
        assoc["parent_account"] = account.parent
        assoc["max"] = {"jobs": {"per": {"count": limit(account.grp_jobs)}}, "tres": {"total": tres(account.grp_tres)}}
        if account.qos:
            assoc["qos"] = sorted(account.qos)
        if account.default_qos:
            assoc["default"] = {"qos": account.default_qos}
        return assoc
    assoc["max"] = {
        "jobs": {"active": limit(account.max_jobs_per_user), "total": limit(account.max_submit_jobs_per_user)},
        "tres": {"per": {"job": tres(account.max_tres_per_job)}},
    }
    return assoc


def desired_associations(cluster: SlurmCluster) -> list[dict[str, Any]]:
    """Parents before children, each account's association before its users'."""
    c = meta.cluster_name(cluster)
    accounts = {a.name: a for a in cluster.spec.accounting.accounts}
    ordered: list[AccountSpec] = []

    def visit(account: AccountSpec) -> None:
        if account in ordered:
            return
        parent = accounts.get(account.parent)
        if parent is not None and parent is not account:
            visit(parent)
        ordered.append(account)

    for account in cluster.spec.accounting.accounts:
        visit(account)
    out = []
    for account in ordered:
        out.append(_association(c, account, ""))
        out += [_association(c, account, user) for user in sorted(account.users)]
    return out


def desired_users(cluster: SlurmCluster) -> list[dict[str, Any]]:
    """Every user the spec names, with its default account: the first account in spec order that lists it."""
    defaults: dict[str, str] = {}
    for account in cluster.spec.accounting.accounts:
        for user in account.users:
            defaults.setdefault(user, account.name)
    return [{"name": user, "default": {"account": defaults[user]}} for user in sorted(defaults)]


def desired_state(cluster: SlurmCluster) -> dict[str, list[dict[str, Any]]]:
    """Everything the operator keeps in the accounting database for this cluster, by endpoint (in apply order)."""
    accounting = cluster.spec.accounting
    return {
        "qos": [desired_qos(q) for q in sorted(accounting.qos, key=lambda q: q.name)],
        "accounts": [desired_account(a) for a in sorted(accounting.accounts, key=lambda a: a.name)],
        "users": desired_users(cluster),
        "associations": desired_associations(cluster),
    }


# --- comparing with what Slurm holds ------------------------------------------------------------------------------


def _is_limit(value: Any) -> bool:
    return isinstance(value, dict) and set(value) == {"set", "infinite", "number"}


def _is_tres(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(v, dict) and {"type", "count"} <= set(v) for v in value)


def _limit_value(value: Any) -> int | None:
    """None for no limit: unset, infinite, or absent from the live record."""
    if not isinstance(value, dict) or not value.get("set", False) or value.get("infinite", False):
        return None
    number = value.get("number")
    return number if isinstance(number, int) else None


def _tres_counts(value: Any) -> dict[str, int]:
    counts: dict[str, int] = {}
    for entry in value if isinstance(value, list) else []:
        if isinstance(entry, dict) and isinstance(entry.get("count"), int) and entry["count"] >= 0:
            key = entry.get("type", "") + (f"/{entry['name']}" if entry.get("name") else "")
            counts[key] = entry["count"]
    return counts


def _update(desired: Any, live: Any) -> tuple[bool, Any]:
    """(differs, what to send): the desired value, with TRES the live record has but the spec dropped cleared."""
    if _is_limit(desired):
        return _limit_value(desired) != _limit_value(live), desired
    if _is_tres(desired):
        want, have = _tres_counts(desired), _tres_counts(live)
        if want == have:
            return False, desired
        cleared = {key: CLEAR_TRES for key in have.keys() - want.keys()}
        return True, tres({**want, **cleared})
    if isinstance(desired, dict):
        live_dict = live if isinstance(live, dict) else {}
        parts = {key: _update(value, live_dict.get(key)) for key, value in desired.items()}
        return any(d for d, _ in parts.values()), {key: sent for key, (_, sent) in parts.items()}
    if isinstance(desired, list):
        return sorted(map(str, desired)) != sorted(map(str, live or [])), desired
    return desired != live, desired


def record_key(endpoint: str, record: Mapping[str, Any]) -> tuple[str, ...]:
    """How a record is matched with its live counterpart."""
    if endpoint == "associations":
        return tuple(str(record.get(k) or "") for k in ("cluster", "account", "user", "partition"))
    return (str(record.get("name", "")),)


def new_associations(
    desired: list[dict[str, Any]], live: list[dict[str, Any]]
) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """The desired associations Slurm does not have yet, in order (parents first), each as the association_condition
    that creates it the way sacctmgr does (an account's under its parent, a user's in its account), with the record
    it stands for. Their limits are set afterwards, as changes to associations that exist."""
    have = {record_key("associations", r) for r in live}
    out = []
    for record in desired:
        if record_key("associations", record) in have:
            continue
        where: dict[str, Any] = {"accounts": [record["account"]], "clusters": [record["cluster"]]}
        if record["user"]:
            out.append(({**where, "users": [record["user"]]}, record))
        else:
            out.append(({**where, "association": {"parent": record["parent_account"]}}, record))
    return out


def changes(endpoint: str, desired: list[dict[str, Any]], live: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The desired records of one endpoint that are missing or differ in Slurm, ready to send; [] when converged."""
    by_key = {record_key(endpoint, r): r for r in live}
    out = []
    for record in desired:
        current = by_key.get(record_key(endpoint, record))
        if current is None:
            out.append(record)
            continue
        differs, update = _update(record, current)
        if differs:
            out.append(update)
    return out
