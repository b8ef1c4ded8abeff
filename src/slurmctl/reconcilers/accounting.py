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
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from slurmctl.api.v1 import Reason, SlurmClusterStatus
from slurmctl.reconcilers.base import ComponentReconciler, Loaded
from slurmctl.reconcilers.observed import available_replicas, resource_version
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
from slurmctl.render.kinds import DEPLOYMENT, MARIADB, SECRET, SERVICE, SLURM_CLUSTER
from slurmctl.runtime import Manager, Request, Result, enqueue_mapped
from slurmctl.runtime.manager import ControllerBuilder

# mariadb-operator may be installed later: look again this often while it is missing.
MARIADB_RECHECK_SECONDS = 15.0


def password_secret_requests(manager: Manager) -> Callable[[Mapping[str, Any]], Iterable[Request]]:
    """Map a Secret to the clusters whose external database password it holds, so creating it ends their wait."""

    def mapper(secret: Mapping[str, Any]) -> Iterable[Request]:
        md = secret.get("metadata") or {}
        namespace, name = md.get("namespace", ""), md.get("name")
        for obj in manager.cache.list(*SLURM_CLUSTER, namespace=namespace):
            accounting = (obj.get("spec") or {}).get("accounting") or {}
            ref = ((accounting.get("external") or {}).get("passwordSecretRef") or {}).get("name")
            if ref == name:
                yield Request(namespace, obj["metadata"]["name"])

    return mapper


class AccountingReconciler(ComponentReconciler):
    def watch(self, builder: ControllerBuilder) -> None:
        """The external database's password Secret is the user's, not ours: map it to the clusters naming it."""
        builder.watches(*SECRET, enqueue_mapped(password_secret_requests(self.manager)))

    async def reconcile_valid(self, loaded: Loaded) -> Result | None:
        cluster = loaded.cluster
        c = loaded.name
        if not cluster.spec.accounting.enabled:
            await self._remove(loaded)
            return None
        ids = await self.secret_ids(loaded, meta.munge_secret(c))
        if ids is None:
            return None
        (munge_key_id,) = ids
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
            return None
        password, password_id = read
        inputs = self.inputs(loaded, munge_key_id=munge_key_id, dbd_password=password, dbd_password_id=password_id)
        await self.apply(loaded, self.desired(inputs))
        deployment = self.live(DEPLOYMENT, meta.accounting(c), loaded.namespace)
        if available_replicas(deployment) >= 1:
            cond = self.condition(loaded, ok=True, reason=Reason.READY, message=f"slurmdbd is available ({db.host})")
        else:
            cond = self.condition(loaded, ok=False, reason=Reason.NOT_READY, message="slurmdbd is not available yet")
        await self.write_status(loaded, SlurmClusterStatus(conditions=[cond]))
        return None

    async def _mariadb_operator_installed(self) -> bool:
        if await self.manager.is_served(*MARIADB):
            return True
        self.manager.client.forget_discovery()  # "not served" answers are cached; it may have been installed since
        return await self.manager.is_served(*MARIADB)

    async def _password(self, loaded: Loaded, db: Database) -> tuple[str, str] | None:
        """The password and an id that changes with it (the Secret's resourceVersion), or None after saying why not."""
        where = f"Secret {loaded.namespace}/{db.password_secret} (key {db.password_key})"
        source = self.live(SECRET, db.password_secret, loaded.namespace)
        encoded = ((source or {}).get("data") or {}).get(db.password_key)
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
