"""The `accounting` component: slurmdbd (its config Secret, Service and Deployment), the MariaDB resource when
mariadb-operator is installed, and AccountingReady.

The database password is read from the referenced Secret at reconcile time and goes only into the `<c>-slurmdbd`
Secret: never into a log line, an Event, a condition or an annotation (the config hash uses the source Secret's
resourceVersion instead).
"""

from __future__ import annotations

import base64
import binascii
import secrets
from typing import Any

from slurmctl.api.v1 import LIMITS_APPLIED, Condition, Reason, SlurmClusterStatus
from slurmctl.reconcilers.base import ComponentReconciler
from slurmctl.reconcilers.component import Component, component_is
from slurmctl.reconcilers.context import Context
from slurmctl.reconcilers.limits import LimitsRefusedError, apply_limits
from slurmctl.reconcilers.loading import Loaded
from slurmctl.reconcilers.observed import available_replicas, cluster_of_pod, resource_version
from slurmctl.reconcilers.slurm_access import REST_COMPONENT
from slurmctl.reconcilers.views import Secret
from slurmctl.render import meta
from slurmctl.render.accounting import (
    MARIADB_API_VERSION,
    MARIADB_KIND,
    Database,
    check_password,
    database,
    render_mariadb_secret,
    uses_mariadb,
)
from slurmctl.render.kinds import DEPLOYMENT, MARIADB, POD, SECRET, SERVICE
from slurmctl.runtime import NotFound, Result
from slurmctl.runtime.handlers import enqueue_mapped
from slurmctl.runtime.manager import ControllerBuilder
from slurmctl.slurm import SlurmError, SlurmUnavailable

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


class AccountingReconciler(ComponentReconciler):
    def __init__(self, ctx: Context, component: Component) -> None:
        super().__init__(ctx, component)
        self._limits_warned: dict[tuple[str, str], str] = {}  # the last refusal or outage said, per cluster

    def watch(self, builder: ControllerBuilder) -> None:
        """slurmrestd turning ready is when limits can first be applied."""
        builder.watches(*POD, enqueue_mapped(cluster_of_pod), predicates=[component_is(REST_COMPONENT)])

    async def reconcile_valid(self, loaded: Loaded) -> Result | None:
        cluster = loaded.cluster
        c = loaded.name
        if not cluster.spec.accounting.enabled:
            await self._remove(loaded)
            return None
        ids = await self.secret_ids(loaded, meta.munge_secret(c), meta.jwt_key_secret(c))
        if ids is None:
            return None
        munge_key_id, jwt_key_id = ids
        if uses_mariadb(cluster):
            if not await self._mariadb_operator_installed():
                await self._fail(
                    loaded,
                    Reason.MARIADB_OPERATOR_MISSING,
                    "spec.accounting.mariadb.enabled needs mariadb-operator, which is not installed "
                    f"(no {MARIADB_KIND} in {MARIADB_API_VERSION}); install it or use spec.accounting.external",
                )
                return Result(requeue_after=MARIADB_RECHECK_SECONDS)

            async def passwords() -> dict[str, Any]:
                return render_mariadb_secret(
                    cluster, password=secrets.token_urlsafe(24), root_password=secrets.token_urlsafe(24)
                )

            await self.create_once(loaded, meta.mariadb_passwords(c), passwords)
        db = database(cluster)
        read = await self._password(loaded, db)
        if read is None:
            return Result(requeue_after=PASSWORD_RECHECK_SECONDS)
        password, password_id = read
        inputs = self.inputs(
            loaded,
            munge_key_id=munge_key_id,
            jwt_key_id=jwt_key_id,
            dbd_password=password,
            dbd_password_id=password_id,
        )
        await self.apply(loaded, self.desired(inputs))
        deployment = self.live(DEPLOYMENT, meta.accounting(c), loaded.namespace)
        again = None if uses_mariadb(cluster) else PASSWORD_REFRESH_SECONDS
        conditions = []
        if available_replicas(deployment) >= 1:
            cond = self.condition(loaded, ok=True, reason=Reason.READY, message=f"slurmdbd is available ({db.host})")
            limits, limits_again = await self._limits(loaded)
            conditions += [limits] if limits is not None else []
            again = min(filter(None, (again, limits_again)), default=None)
        elif (refused := await self.pods_refused(loaded, deployment)) is not None:
            cond = refused
        else:
            # The operator cannot see why (it reads no pods and reaches no database); slurmdbd's own log and its
            # readiness probe's events do. What it can say is where slurmdbd keeps trying to store.
            message = (
                f"slurmdbd is not answering yet; it stores accounting in the database at {db.host}:{db.port}"
                f" (user {db.user}): if this lasts, check that {db.host} is reachable from the pod and the"
                f" credentials work (kubectl logs deployment/{meta.accounting(c)} -c slurmdbd)"
            )
            cond = self.condition(loaded, ok=False, reason=Reason.NOT_READY, message=message)
        await self.write_status(loaded, SlurmClusterStatus(conditions=[cond, *conditions]))
        return None if again is None else Result(requeue_after=again)

    async def _limits(self, loaded: Loaded) -> tuple[Condition | None, float | None]:
        """LimitsApplied, and when to look again: the accounts and QOS spec.accounting declares, made so in Slurm
        through slurmrestd (reconcilers/limits.py). Looked at again every LIMITS_RELEVEL_SECONDS, so that a limit
        changed by hand with sacctmgr goes back to what the spec says (that costs reads, and writes only the record
        that drifted)."""
        accounting = loaded.cluster.spec.accounting
        key = (loaded.namespace, loaded.name)
        if not accounting.declares_limits:
            self._limits_warned.pop(key, None)
            if loaded.condition(LIMITS_APPLIED) is None:
                return None, None
            message = "spec.accounting declares no accounts or QOS (what it declared before is left in Slurm as is)"
            return self.condition(loaded, ok=True, reason=Reason.APPLIED, message=message, type_=LIMITS_APPLIED), None
        reason, retry = Reason.SLURM_UNREACHABLE, LIMITS_RETRY_SECONDS
        try:
            if not loaded.cluster.spec.rest.enabled:
                raise SlurmUnavailable("spec.rest.enabled is false, and limits are applied through slurmrestd")
            written = await apply_limits(self.ctx.slurm.client(loaded.name, loaded.namespace), loaded.cluster)
        except LimitsRefusedError as exc:
            reason, retry, message = Reason.LIMITS_REFUSED, LIMITS_RELEVEL_SECONDS, f"Slurm refused {exc}"
        except SlurmError as exc:
            message = f"the accounts and QOS of spec.accounting cannot be applied yet: {exc}"
        else:
            self._limits_warned.pop(key, None)
            if written:
                self.event(loaded, "Normal", "LimitsApplied", f"wrote {written} accounting records to Slurm")
            declared = f"{len(accounting.accounts)} accounts and {len(accounting.qos)} QOS"
            cond = self.condition(
                loaded,
                ok=True,
                reason=Reason.APPLIED,
                message=f"Slurm holds the {declared} of spec.accounting",
                type_=LIMITS_APPLIED,
            )
            return cond, LIMITS_RELEVEL_SECONDS
        if self._limits_warned.get(key) != message:  # one Event and one log line per new refusal or outage
            self.warn(loaded, reason.value, message)
        self._limits_warned[key] = message
        return self.condition(loaded, ok=False, reason=reason, message=message, type_=LIMITS_APPLIED), retry

    async def _mariadb_operator_installed(self) -> bool:
        if await self.manager.is_served(*MARIADB):
            return True
        self.manager.client.forget_discovery()  # "not served" answers are cached; it may have been installed since
        return await self.manager.is_served(*MARIADB)

    async def _password(self, loaded: Loaded, db: Database) -> tuple[str, str] | None:
        """The password and an id that changes with it (the Secret's resourceVersion), or None after saying why not."""
        where = f"Secret {loaded.namespace}/{db.password_secret} (key {db.password_key})"
        source = self.live(SECRET, db.password_secret, loaded.namespace)  # the operator's own (mariadb passwords)
        if source is None:
            try:
                source = await self.manager.client.get(*SECRET, db.password_secret, namespace=loaded.namespace)
            except NotFound:
                source = None
        encoded = Secret.of(source).data.get(db.password_key)
        if source is None or encoded is None:
            message = f"the database password is missing: {where} not found"
            await self._fail(loaded, Reason.PASSWORD_SECRET_MISSING, message)
            return None
        try:
            # A decoding error's message can quote bytes of the password: say only that it is not text.
            password = base64.b64decode(encoded, validate=True).decode()
        except (binascii.Error, UnicodeDecodeError):
            await self._fail(loaded, Reason.INVALID_PASSWORD, f"the database password in {where} is not UTF-8 text")
            return None
        try:
            check_password(password)  # its messages never contain the password
        except ValueError as exc:
            message = f"the database password in {where} cannot be used: {exc}"
            await self._fail(loaded, Reason.INVALID_PASSWORD, message)
            return None
        return password, resource_version(source)

    async def _fail(self, loaded: Loaded, reason: Reason, message: str) -> None:
        previous = loaded.condition(self.condition_type)
        if previous is None or previous.reason != reason or previous.message != message:
            self.warn(loaded, reason.value, message)
        await self.report(loaded, ok=False, reason=reason, message=message)

    async def _remove(self, loaded: Loaded) -> None:
        """Disabling accounting removes slurmdbd. The database and its passwords hold data: they stay."""
        for kind in (DEPLOYMENT, SERVICE, SECRET):
            await self.prune(loaded, kind, keep=[meta.mariadb_passwords(loaded.name)])
        if loaded.condition(self.condition_type) is not None:  # it was enabled once
            await self.report(loaded, ok=False, reason=Reason.DISABLED, message="spec.accounting.enabled is false")
