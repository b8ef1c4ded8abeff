"""The accounting component's decisions as data: an observation in, a plan out (its behaviour against a fake API
server and a fake Slurm: test_accounting.py). No API server, no Slurm, no clock."""

from __future__ import annotations

import base64
import json
from typing import Any

from slurmctl.api.v1 import ACCOUNTING_READY, LIMITS_APPLIED, Policy
from slurmctl.reconcilers import accounting
from slurmctl.reconcilers.accounting import AccountingObservation, LiveRecords
from slurmctl.reconcilers.loading import Loaded, Loader
from slurmctl.reconcilers.plan import Plan
from slurmctl.reconcilers.views import Secret
from slurmctl.render import meta
from slurmctl.render.accounting_limits import desired_state
from slurmctl.render.kinds import DEPLOYMENT, SECRET, SERVICE, Kind
from slurmctl.slurm import SlurmUnavailable
from test.unit.reconcilers.env import NAME, NS
from test.unit.reconcilers.plans import loaded, observe
from test.unit.reconcilers.test_component_plans import child

PASSWORD = "s3cret-Db-pass"
EXTERNAL = {
    "enabled": True,
    "external": {"host": "db.example.com", "user": "slurm", "passwordSecretRef": {"name": "db", "key": "pw"}},
}
MARIADB = {"enabled": True, "mariadb": {"enabled": True}}
LIMITS = {
    **EXTERNAL,
    "qos": [{"name": "small", "maxJobsPerUser": 1}],
    "accounts": [{"name": "physics", "users": ["alice"], "maxJobsPerUser": 1, "qos": ["small"]}],
}
SLURMDBD = meta.accounting(NAME)


def secret(name: str, data: dict[str, bytes], *, version: str = "7") -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": name, "namespace": NS, "resourceVersion": version},
        "data": {k: base64.b64encode(v).decode() for k, v in data.items()},
    }


def obs(cluster: Loaded, **facts: Any) -> AccountingObservation:
    """An observation with the keys there; `facts`: the base observation's and accounting's own."""
    own = {k: facts.pop(k) for k in ("mariadb_operator", "password_secret", "records") if k in facts}
    return AccountingObservation.of(observe(cluster, **facts), **own)


def said(p: Plan, type_: str = ACCOUNTING_READY) -> tuple[str, str, str]:
    assert p.status is not None
    cond = next(c for c in p.status.conditions if c.type == type_)
    return cond.status, cond.reason, cond.message


def available(**facts: Any) -> dict[str, Any]:
    """slurmdbd's Deployment observed available."""
    return {"children": {DEPLOYMENT: {SLURMDBD: child(DEPLOYMENT, SLURMDBD, availableReplicas=1)}}, **facts}


def text(obj: dict[str, Any]) -> str:
    """An object as JSON, with its Secret data decoded."""
    data = Secret.of(obj).data.values() if obj["kind"] == "Secret" else ()
    return json.dumps(obj) + "".join(base64.b64decode(v).decode(errors="replace") for v in data)


def names(p: Plan) -> list[tuple[str, str]]:
    return [(o["kind"], o["metadata"]["name"]) for o in p.apply]


def ran_before(condition: str, **extra: Any) -> Loaded:
    """A cluster whose status holds `condition` (its component ran before)."""
    obj = loaded(**extra).obj
    said = {
        "type": condition,
        "status": "True",
        "reason": "Ready",
        "message": "",
        "lastTransitionTime": "2026-12-01T00:00:00Z",
    }
    obj["status"]["conditions"].append(said)
    found = Loader(policy=Policy(allow_root_logins=True)).load(obj)
    assert isinstance(found, Loaded)
    return found


def known(p: Plan) -> dict[str, Any]:
    """The status as the writer leaves it once `p` is carried out: what the next observation says."""
    assert p.status is not None
    return {"conditions": [c.model_dump(mode="json", by_alias=True, exclude_none=True) for c in p.status.conditions]}


def test_disabling_prunes_slurmdbd_keeps_the_database_passwords_and_says_so_only_once_enabled_before() -> None:
    kept, config = meta.mariadb_passwords(NAME), meta.slurmdbd_secret(NAME)
    live: dict[Kind, dict[str, Any]] = {
        DEPLOYMENT: {SLURMDBD: child(DEPLOYMENT, SLURMDBD)},
        SERVICE: {SLURMDBD: child(SERVICE, SLURMDBD)},
        SECRET: {config: child(SECRET, config), kept: child(SECRET, kept)},
    }
    never = accounting.plan(obs(loaded(), children=live))
    gone = sorted((d.kind.kind, d.name, d.uid) for d in never.delete)
    assert gone == [
        ("Deployment", SLURMDBD, f"{SLURMDBD}-uid"),
        ("Secret", config, f"{config}-uid"),
        ("Service", SLURMDBD, f"{SLURMDBD}-uid"),
    ]
    assert never.status is None and not never.apply
    once = accounting.plan(obs(ran_before(ACCOUNTING_READY), children=live))
    assert said(once) == ("False", "Disabled", "spec.accounting.enabled is false")
    assert len(once.delete) == 3


def test_a_missing_mariadb_operator_is_said_once_and_looked_for_again() -> None:
    first = accounting.plan(obs(loaded(accounting=MARIADB)))
    status, reason, message = said(first)
    assert (status, reason) == ("False", "MariaDBOperatorMissing") and "spec.accounting.external" in message
    assert [(n.type, n.reason) for n in first.events] == [("Warning", "MariaDBOperatorMissing")]
    assert first.requeue_after == accounting.MARIADB_RECHECK_SECONDS and not first.apply
    again = accounting.plan(obs(loaded(accounting=MARIADB), said=known(first)))
    assert again.events == (), "said already: no second Event"


async def test_the_mariadb_passwords_are_generated_only_when_their_secret_is_created() -> None:
    p = accounting.plan(obs(loaded(accounting=MARIADB), mariadb_operator=True))
    assert names(p) == [("MariaDB", meta.mariadb(NAME))], "the database starts; slurmdbd waits for its password"
    ((create,),) = (p.create,)
    assert create.obj is None and create.make is not None, "the plan holds no password"
    assert said(p)[:2] == ("False", "NotReady") and p.events == ()
    one, two = await create.body(), await create.body()
    assert one["metadata"]["name"] == meta.mariadb_passwords(NAME)
    assert set(one["data"]) == {"password", "root-password"} and one["data"] != two["data"]
    # Once it is there, it is the password slurmdbd gets, and it is never created again.
    made = secret(meta.mariadb_passwords(NAME), {"password": PASSWORD.encode(), "root-password": b"r00t-Pass"})
    ready = accounting.plan(obs(loaded(accounting=MARIADB), mariadb_operator=True, password_secret=made))
    assert ready.create == () and ready.requeue_after is None
    assert ("Secret", meta.slurmdbd_secret(NAME)) in names(ready) and ("MariaDB", meta.mariadb(NAME)) in names(ready)


def test_a_missing_or_unusable_password_is_said_with_one_warning_and_never_quoted() -> None:
    missing = accounting.plan(obs(loaded(accounting=EXTERNAL)))
    assert said(missing) == (
        "False",
        "PasswordSecretMissing",
        f"the database password is missing: Secret {NS}/db (key pw) not found",
    )
    assert [n.reason for n in missing.events] == ["PasswordSecretMissing"]
    assert missing.requeue_after == accounting.PASSWORD_RECHECK_SECONDS and not missing.apply
    bad = "has space#and-hash"
    unusable = accounting.plan(obs(loaded(accounting=EXTERNAL), password_secret=secret("db", {"pw": bad.encode()})))
    assert said(unusable)[:2] == ("False", "InvalidPassword")
    assert bad not in repr(unusable), "not in the condition, an Event or anything else the plan holds"
    binary = accounting.plan(obs(loaded(accounting=EXTERNAL), password_secret=secret("db", {"pw": b"\xff\xfe"})))
    assert said(binary)[2].endswith("is not UTF-8 text")


def test_the_password_reaches_only_the_slurmdbd_secret_and_its_version_rolls_slurmdbd() -> None:
    p = accounting.plan(obs(loaded(accounting=EXTERNAL), password_secret=secret("db", {"pw": PASSWORD.encode()})))
    where = [f"{o['kind']}/{o['metadata']['name']}" for o in p.apply if PASSWORD in text(o)]
    assert where == [f"Secret/{meta.slurmdbd_secret(NAME)}"]
    assert PASSWORD not in repr(p.status) and PASSWORD not in repr(p.events)
    status, reason, message = said(p)
    assert (status, reason) == ("False", "NotReady") and "db.example.com:3306" in message
    assert p.requeue_after == accounting.PASSWORD_REFRESH_SECONDS, "a user's Secret is read again, not watched"
    newer = accounting.plan(
        obs(loaded(accounting=EXTERNAL), password_secret=secret("db", {"pw": PASSWORD.encode()}, version="8"))
    )
    hashes = [
        next(o for o in q.apply if o["kind"] == "Deployment")["spec"]["template"]["metadata"]["annotations"]
        for q in (p, newer)
    ]
    assert hashes[0] != hashes[1]


def test_a_refused_slurmdbd_pod_is_named_once() -> None:
    message = f"Deployment {SLURMDBD}: pods refused: violates PodSecurity restricted"
    live = {DEPLOYMENT: {SLURMDBD: child(DEPLOYMENT, SLURMDBD)}}
    facts = {
        "children": live,
        "refusals": {SLURMDBD: message},
        "password_secret": secret("db", {"pw": PASSWORD.encode()}),
    }
    first = accounting.plan(obs(loaded(accounting=EXTERNAL), **facts))
    assert said(first) == ("False", "PodRefused", message)
    assert [n.reason for n in first.events] == ["PodRefused"]
    assert accounting.plan(obs(loaded(accounting=EXTERNAL), said=known(first), **facts)).events == ()


def limits(**facts: Any) -> Plan:
    return accounting.plan(
        obs(loaded(accounting=LIMITS), **available(password_secret=secret("db", {"pw": PASSWORD.encode()}), **facts))
    )


def test_new_associations_are_added_then_leveled_in_the_same_pass() -> None:
    p = limits(records=LiveRecords({"qos": [], "accounts": [], "associations": [], "users": []}))
    assert said(p) == ("True", "Ready", "slurmdbd is available (db.example.com)")
    assert said(p, LIMITS_APPLIED) == ("True", "Applied", "Slurm holds the 1 accounts and 1 QOS of spec.accounting")
    assert p.records is not None and p.records.condition == LIMITS_APPLIED
    steps = [(w.verb, w.kind, w.field) for w in p.records.writes]
    assert steps == [
        ("update", "qos", "spec.accounting.qos[0]"),
        ("update", "accounts", "spec.accounting.accounts[0]"),
        ("add", "associations", "spec.accounting.accounts[0]"),
        ("add", "associations", "spec.accounting.accounts[0].users[0]"),
        ("level", "associations", "spec.accounting.accounts[0]"),
        ("level", "associations", "spec.accounting.accounts[0].users[0]"),
        ("level", "users", "spec.accounting.accounts[0].users[0]"),
    ], "what an add leaves is compared with Slurm after it"
    assert p.requeue_after == accounting.LIMITS_RELEVEL_SECONDS
    assert p.events == ()


def accounting_state() -> dict[str, Any]:
    """What Slurm holds once it holds everything the spec declares."""
    return dict(desired_state(loaded(accounting=LIMITS).cluster))


def test_a_converged_slurm_gets_no_write_and_a_drifted_record_only_its_own() -> None:
    first = limits(records=LiveRecords({"qos": [], "accounts": [], "associations": [], "users": []}))
    assert first.records is not None
    desired = accounting_state()
    converged = limits(records=LiveRecords(desired))
    assert converged.records is None and said(converged, LIMITS_APPLIED)[:2] == ("True", "Applied")
    drifted = {**desired, "qos": [{**desired["qos"][0], "priority": {"set": True, "infinite": False, "number": 9}}]}
    p = limits(records=LiveRecords(drifted))
    assert p.records is not None
    assert [(w.verb, w.kind) for w in p.records.writes] == [("update", "qos")]


def test_an_unreachable_slurm_is_said_once_and_asked_again_soon() -> None:
    down = LiveRecords(error=SlurmUnavailable("slurmrestd: connection refused"))
    first = limits(records=down)
    status, reason, message = said(first, LIMITS_APPLIED)
    assert (status, reason) == ("False", "SlurmUnreachable") and message.endswith("connection refused")
    assert [n.reason for n in first.events] == ["SlurmUnreachable"] and first.records is None
    assert first.requeue_after == accounting.LIMITS_RETRY_SECONDS
    assert limits(records=down, said=known(first)).events == ()
    assert said(first) == ("True", "Ready", "slurmdbd is available (db.example.com)"), "the cluster is not degraded"


def test_without_slurmrestd_limits_say_they_need_it_and_a_cluster_without_limits_says_nothing() -> None:
    facts = available(password_secret=secret("db", {"pw": PASSWORD.encode()}))
    no_rest = accounting.plan(obs(loaded(accounting=LIMITS, rest={"enabled": False}), **facts))
    assert "spec.rest.enabled" in said(no_rest, LIMITS_APPLIED)[2] and no_rest.records is None
    plain = accounting.plan(obs(loaded(accounting=EXTERNAL), **facts))
    assert plain.status is not None and [c.type for c in plain.status.conditions] == [ACCOUNTING_READY]
    dropped = accounting.plan(obs(ran_before(LIMITS_APPLIED, accounting=EXTERNAL), **facts))
    assert said(dropped, LIMITS_APPLIED)[:2] == ("True", "Applied") and dropped.records is None
