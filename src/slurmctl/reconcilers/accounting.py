"""The `accounting` component: slurmdbd (its config Secret, Service and Deployment), the MariaDB resource when
mariadb-operator is installed, AccountingReady, and the accounts and QOS of spec.accounting kept in Slurm
(LimitsApplied). Each pass observes the cluster (`AccountingReconciler.observe`), decides purely (`plan`) and has the
generic executor carry the plan out (reconcilers/executor.py).

The database password is read from the referenced Secret at reconcile time and goes only into the `<c>-slurmdbd`
Secret: never into a log line, an Event, a condition or an annotation (the config hash uses the source Secret's
resourceVersion instead). The passwords of the operator's own MariaDB are generated when their Secret is created (a
`Create` whose `make` the executor calls), never in the plan.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import secrets
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from slurmctl.api.v1 import ACCOUNTING_READY, LIMITS_APPLIED, Condition, Reason, SlurmClusterStatus
from slurmctl.reconcilers import upgrade
from slurmctl.reconcilers.base import ComponentReconciler
from slurmctl.reconcilers.component import component_is
from slurmctl.reconcilers.limits import read_records, record_writes
from slurmctl.reconcilers.loading import Loaded
from slurmctl.reconcilers.observation import Observation
from slurmctl.reconcilers.observed import available_replicas, cluster_of_pod, resource_version
from slurmctl.reconcilers.plan import Create, Note, Obj, Plan, RecordWrites
from slurmctl.reconcilers.slurm_access import REST_COMPONENT
from slurmctl.reconcilers.views import Secret
from slurmctl.render import meta
from slurmctl.render.accounting import (
    MARIADB_API_VERSION,
    MARIADB_KIND,
    Database,
    check_password,
    database,
    render_backup_claim,
    render_backup_job,
    render_mariadb,
    render_mariadb_secret,
    uses_mariadb,
)
from slurmctl.render.kinds import DEPLOYMENT, MARIADB, POD, SECRET, SERVICE
from slurmctl.render.manifests import accounting_objects
from slurmctl.runtime import NotFound
from slurmctl.runtime.handlers import enqueue_mapped
from slurmctl.runtime.manager import ControllerBuilder
from slurmctl.slurm import AccountingKind, SlurmError

# mariadb-operator may be installed later: look again this often while it is missing.
MARIADB_RECHECK_SECONDS = 15.0
# The database password Secret is the user's: it is read by name (a GET), never watched, since watching it would mean
# listing every Secret of the namespace. Read it again this often while it is missing or unusable, and this often
# once it works, so that a new password still rolls slurmdbd (a GET; the apply is skipped when nothing changed).
PASSWORD_RECHECK_SECONDS = 5.0
PASSWORD_REFRESH_SECONDS = 60.0

# While Slurm cannot be asked (slurmrestd starting, slurmdbd restarting), try the limits again this often; once they
# are applied (or refused), look again this often.
LIMITS_RETRY_SECONDS = 10.0
LIMITS_RELEVEL_SECONDS = 60.0
# What LimitsApplied says, before Slurm's error, while Slurm cannot be asked.
LIMITS_UNREACHABLE = "the accounts and QOS of spec.accounting cannot be applied yet"
REST_NEEDED = "spec.rest.enabled is false, and limits are applied through slurmrestd"


@dataclass(frozen=True)
class LiveRecords:
    """Slurm's accounting records of each kind spec.accounting declares, as read before deciding; `error`: why Slurm
    could not be asked (then `records` is empty)."""

    records: Mapping[AccountingKind, Sequence[Obj]] = field(default_factory=dict)
    error: SlurmError | None = None


@dataclass(frozen=True)
class AccountingObservation(Observation):
    """The component's observation, plus what only accounting reads, each only once the plan gets that far: whether
    mariadb-operator's kind is served (asked when the spec uses it), the database password Secret (None: not found,
    or not read), and Slurm's accounting records (None: not asked; read only while slurmdbd is available and
    slurmrestd enabled, when spec.accounting declares limits)."""

    mariadb_operator: bool = False
    password_secret: Obj | None = field(default=None, repr=False)  # its data is the password
    records: LiveRecords | None = None

    @classmethod
    def of(cls, base: Observation, **facts: Any) -> AccountingObservation:
        """The component's observation `base`, with these accounting facts."""
        return cls(**{f.name: getattr(base, f.name) for f in dataclasses.fields(base)}, **facts)


@dataclass(frozen=True)
class Password:
    """The database password (for the `<c>-slurmdbd` Secret only) and an id that changes with it (the source Secret's
    resourceVersion), or why it cannot be used (`problem`: a reason and a message that never quotes it)."""

    value: str = field(default="", repr=False)
    id: str = ""
    problem: tuple[Reason, str] | None = None


class AccountingReconciler(ComponentReconciler):
    def watch(self, builder: ControllerBuilder) -> None:
        """slurmrestd turning ready is when limits can first be applied."""
        builder.watches(*POD, enqueue_mapped(cluster_of_pod), predicates=[component_is(REST_COMPONENT)])

    async def observe(self, loaded: Loaded) -> AccountingObservation:
        """What the plan reads, read once, in the order it decides: nothing beyond the component's observation while
        accounting is disabled or a key is missing, nor the password while mariadb-operator is missing, nor Slurm while
        slurmdbd is not available or the password cannot be used."""
        base = await super().observe(loaded)
        obs = AccountingObservation.of(base)
        cluster, c = loaded.cluster, loaded.name
        if not cluster.spec.accounting.enabled or not {meta.munge_secret(c), meta.jwt_key_secret(c)} <= set(obs.keys):
            return obs
        if uses_mariadb(cluster):
            obs = dataclasses.replace(obs, mariadb_operator=await self._mariadb_operator_installed())
            if not obs.mariadb_operator:
                return obs
        db = database(cluster)
        obs = dataclasses.replace(obs, password_secret=await self._password_secret(loaded, db))
        deployment = obs.owned(DEPLOYMENT).get(meta.accounting(c))
        accounting = cluster.spec.accounting
        if (
            read_password(obs, db).problem is None
            and available_replicas(deployment) >= 1
            and accounting.declares_limits
            and cluster.spec.rest.enabled
        ):
            try:
                live = await read_records(self.ctx.slurm.client(c, loaded.namespace), cluster)
            except SlurmError as exc:
                return dataclasses.replace(obs, records=LiveRecords(error=exc))
            obs = dataclasses.replace(obs, records=LiveRecords(live))
        return obs

    async def _mariadb_operator_installed(self) -> bool:
        if await self.manager.is_served(*MARIADB):
            return True
        self.manager.client.forget_discovery()  # "not served" answers are cached; it may have been installed since
        return await self.manager.is_served(*MARIADB)

    async def _password_secret(self, loaded: Loaded, db: Database) -> Obj | None:
        """The Secret holding the database password: the operator's own (the MariaDB passwords) from the cache, a
        user's by name (a GET); None when there is none."""
        cached = self.cache.get(*SECRET, db.password_secret, namespace=loaded.namespace)
        if cached is not None:
            return cached
        try:
            return await self.manager.client.get(*SECRET, db.password_secret, namespace=loaded.namespace)
        except NotFound:
            return None


def read_password(obs: AccountingObservation, db: Database) -> Password:
    """The password in the observed Secret, decoded and checked: a pure reading, whose problems never quote it."""
    where = f"Secret {obs.loaded.namespace}/{db.password_secret} (key {db.password_key})"
    source = obs.password_secret
    encoded = Secret.of(source).data.get(db.password_key)
    if source is None or encoded is None:
        missing = f"the database password is missing: {where} not found"
        return Password(problem=(Reason.PASSWORD_SECRET_MISSING, missing))
    try:
        # A decoding error's message can quote bytes of the password: say only that it is not text.
        password = base64.b64decode(encoded, validate=True).decode()
    except (binascii.Error, UnicodeDecodeError):
        return Password(problem=(Reason.INVALID_PASSWORD, f"the database password in {where} is not UTF-8 text"))
    try:
        check_password(password)  # its messages never contain the password
    except ValueError as exc:
        return Password(problem=(Reason.INVALID_PASSWORD, f"the database password in {where} cannot be used: {exc}"))
    return Password(password, resource_version(source))


def plan(obs: Observation) -> Plan:
    assert isinstance(obs, AccountingObservation), "AccountingReconciler.observe makes the accounting's observation"
    loaded = obs.loaded
    cluster, c = loaded.cluster, loaded.name
    if not cluster.spec.accounting.enabled:
        return _disabled(obs)
    munge, jwt = meta.munge_secret(c), meta.jwt_key_secret(c)
    if (waiting := obs.wait_for_keys(ACCOUNTING_READY, munge, jwt)) is not None:
        return waiting
    db = database(cluster)
    if uses_mariadb(cluster):
        if not obs.mariadb_operator:
            message = (
                "spec.accounting.mariadb.enabled needs mariadb-operator, which is not installed "
                f"(no {MARIADB_KIND} in {MARIADB_API_VERSION}); install it or use spec.accounting.external"
            )
            return _failed(obs, Reason.MARIADB_OPERATOR_MISSING, message, MARIADB_RECHECK_SECONDS)
        if obs.password_secret is None:
            return _making_passwords(obs)
    password = read_password(obs, db)
    if password.problem is not None:
        return _failed(obs, *password.problem, PASSWORD_RECHECK_SECONDS)
    inputs = obs.inputs(
        munge_key_id=obs.keys[munge],
        jwt_key_id=obs.keys[jwt],
        dbd_password=password.value,
        dbd_password_id=password.id,
    )
    again = None if uses_mariadb(cluster) else PASSWORD_REFRESH_SECONDS
    name = meta.accounting(c)
    events: tuple[Note, ...] = ()
    limits: Limits | None = None
    if available_replicas(obs.owned(DEPLOYMENT).get(name)) >= 1:
        message = f"slurmdbd is available ({db.host})"
        cond = obs.condition(ACCOUNTING_READY, ok=True, reason=Reason.READY, message=message)
        limits = _limits(obs)
    elif (refused := obs.refusals.get(name)) is not None:
        events = obs.warn_once(ACCOUNTING_READY, Reason.POD_REFUSED, refused)
        cond = obs.condition(ACCOUNTING_READY, ok=False, reason=Reason.POD_REFUSED, message=refused)
    else:
        # The operator cannot see why (it reads no pods and reaches no database); slurmdbd's own log and its
        # readiness probe's events do. What it can say is where slurmdbd keeps trying to store.
        message = (
            f"slurmdbd is not answering yet; it stores accounting in the database at {db.host}:{db.port}"
            f" (user {db.user}): if this lasts, check that {db.host} is reachable from the pod and the"
            f" credentials work (kubectl logs deployment/{name} -c slurmdbd)"
        )
        cond = obs.condition(ACCOUNTING_READY, ok=False, reason=Reason.NOT_READY, message=message)
    conditions = [cond]
    if limits is not None:
        conditions.append(limits.condition)
        events += limits.events
        again = min(filter(None, (again, limits.again)), default=None)
    return Plan(
        ACCOUNTING_READY,
        apply=(*accounting_objects(inputs), *_backup(obs)),
        events=events,
        status=SlurmClusterStatus(conditions=conditions),
        requeue_after=again,
        records=limits.records if limits else None,
    )


def _backup(obs: Observation) -> tuple[Obj, ...]:
    """While a Slurm upgrade is under way: the claim and the Job that back the database up before slurmdbd moves
    (reconcilers/upgrade.py waits for the Job). Rendered as the line the upgrade leaves renders it, the whole upgrade
    long: the Job's template cannot change, and it stays afterwards as the record of the backup (it goes with the
    SlurmCluster; the claim stays even then)."""
    decision = obs.upgrade
    if decision is None or not decision.upgrading or decision.from_ is None:
        return ()
    leaving = upgrade.pinned(obs.loaded, decision.from_).cluster
    name = upgrade.backup_job_name(obs.loaded.name, decision.from_, decision.wanted)
    job = render_backup_job(leaving, name=name, from_=decision.from_, to=decision.wanted)
    return render_backup_claim(leaving), job


@dataclass(frozen=True)
class Limits:
    """LimitsApplied as planned (the executor overwrites it when Slurm refuses a write or cannot be asked), its
    Warning when news, the records to write, and when to look again."""

    condition: Condition
    events: tuple[Note, ...] = ()
    records: RecordWrites | None = None
    again: float | None = None


def _limits(obs: AccountingObservation) -> Limits | None:
    """The accounts and QOS spec.accounting declares, made so in Slurm through slurmrestd (reconcilers/limits.py).
    Looked at again every LIMITS_RELEVEL_SECONDS, so that a limit changed by hand with sacctmgr goes back to what the
    spec says (that costs reads, and writes only the record that drifted). None: nothing to say (never declared)."""
    cluster = obs.loaded.cluster
    accounting = cluster.spec.accounting
    if not accounting.declares_limits:
        if obs.loaded.condition(LIMITS_APPLIED) is None:
            return None
        message = "spec.accounting declares no accounts or QOS (what it declared before is left in Slurm as is)"
        return Limits(obs.condition(LIMITS_APPLIED, ok=True, reason=Reason.APPLIED, message=message))
    if not cluster.spec.rest.enabled:
        error = REST_NEEDED
    elif obs.records is None:
        error = "Slurm was not asked"
    elif obs.records.error is not None:
        error = str(obs.records.error)
    else:
        writes = record_writes(cluster, obs.records.records)
        declared = f"{len(accounting.accounts)} accounts and {len(accounting.qos)} QOS"
        message = f"Slurm holds the {declared} of spec.accounting"
        cond = obs.condition(LIMITS_APPLIED, ok=True, reason=Reason.APPLIED, message=message)
        step = RecordWrites(writes, LIMITS_APPLIED, LIMITS_UNREACHABLE, LIMITS_RETRY_SECONDS) if writes else None
        return Limits(cond, records=step, again=LIMITS_RELEVEL_SECONDS)
    message = f"{LIMITS_UNREACHABLE}: {error}"
    events = obs.warn_once(LIMITS_APPLIED, Reason.SLURM_UNREACHABLE, message)  # one per new outage, not per pass
    cond = obs.condition(LIMITS_APPLIED, ok=False, reason=Reason.SLURM_UNREACHABLE, message=message)
    return Limits(cond, events=events, again=LIMITS_RETRY_SECONDS)


def _making_passwords(obs: AccountingObservation) -> Plan:
    """The MariaDB passwords Secret is not there yet: create it (the passwords are generated then), and the database
    with it; slurmdbd, which needs the password, follows on the next pass (the Secret's creation wakes this one)."""
    cluster = obs.loaded.cluster
    secret = meta.mariadb_passwords(obs.loaded.name)

    async def passwords() -> Obj:
        return render_mariadb_secret(
            cluster, password=secrets.token_urlsafe(24), root_password=secrets.token_urlsafe(24)
        )

    message = f"creating the database passwords (Secret {secret}); slurmdbd starts once they are there"
    said = obs.report(ACCOUNTING_READY, ok=False, reason=Reason.NOT_READY, message=message)
    return dataclasses.replace(
        said,
        apply=(render_mariadb(cluster),),
        create=(Create(None, make=passwords),),
        requeue_after=PASSWORD_RECHECK_SECONDS,
    )


def _failed(obs: AccountingObservation, reason: Reason, message: str, again: float) -> Plan:
    """AccountingReady says why slurmdbd cannot run, with one Warning Event per new finding; looked at again after
    `again` (what is missing is not watched)."""
    said = obs.report(ACCOUNTING_READY, ok=False, reason=reason, message=message)
    return dataclasses.replace(said, events=obs.warn_once(ACCOUNTING_READY, reason, message), requeue_after=again)


def _disabled(obs: AccountingObservation) -> Plan:
    """Disabling accounting removes slurmdbd. The database and its passwords hold data: they stay."""
    keep = [meta.mariadb_passwords(obs.loaded.name)]
    removed = tuple(gone for kind in (DEPLOYMENT, SERVICE, SECRET) for gone in obs.prune(kind, keep))
    if obs.loaded.condition(ACCOUNTING_READY) is None:  # never enabled: nothing to say
        return Plan(ACCOUNTING_READY, delete=removed)
    said = obs.report(ACCOUNTING_READY, ok=False, reason=Reason.DISABLED, message="spec.accounting.enabled is false")
    return dataclasses.replace(said, delete=removed)
