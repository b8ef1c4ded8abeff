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

from slurmctl.api.v1 import ACCOUNTING_READY, API_VERSION, KIND
from slurmctl.reconcilers.base import SECRET, ComponentReconciler, Loaded
from slurmctl.render import meta
from slurmctl.render.accounting import (
    COMPONENT,
    MARIADB_API_VERSION,
    MARIADB_KIND,
    Database,
    check_password,
    database,
    render_accounting,
    render_mariadb_secret,
    uses_mariadb,
)
from slurmctl.runtime import Manager, Request, Result

DEPLOYMENT = ("apps/v1", "Deployment")
SERVICE = ("v1", "Service")
# mariadb-operator may be installed later: look again this often while it is missing.
MARIADB_RECHECK_SECONDS = 15.0


def password_secret_requests(manager: Manager) -> Callable[[Mapping[str, Any]], Iterable[Request]]:
    """Map a Secret to the clusters whose external database password it holds, so creating it ends their wait."""

    def mapper(secret: Mapping[str, Any]) -> Iterable[Request]:
        md = secret.get("metadata") or {}
        namespace, name = md.get("namespace", ""), md.get("name")
        for obj in manager.cache.list(API_VERSION, KIND, namespace=namespace):
            accounting = (obj.get("spec") or {}).get("accounting") or {}
            ref = ((accounting.get("external") or {}).get("passwordSecretRef") or {}).get("name")
            if ref == name:
                yield Request(namespace, obj["metadata"]["name"])

    return mapper


class AccountingReconciler(ComponentReconciler):
    component = "accounting"
    condition_type = ACCOUNTING_READY

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
                    "MariaDBOperatorMissing",
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
        await self.apply(
            loaded,
            render_accounting(cluster, dbd_password=password, munge_key_id=munge_key_id, dbd_password_id=password_id),
        )
        deployment = self.live(*DEPLOYMENT, meta.accounting(c), loaded.namespace)
        available = int(((deployment or {}).get("status") or {}).get("availableReplicas") or 0)
        if available >= 1:
            cond = self.condition(loaded, ok=True, reason="Ready", message=f"slurmdbd is available ({db.host})")
        else:
            cond = self.condition(loaded, ok=False, reason="NotReady", message="slurmdbd is not available yet")
        await self.write_status(loaded, {"conditions": [cond]})
        return None

    async def _mariadb_operator_installed(self) -> bool:
        if await self.manager.is_served(MARIADB_API_VERSION, MARIADB_KIND):
            return True
        self.manager.client.forget_discovery()  # "not served" answers are cached; it may have been installed since
        return await self.manager.is_served(MARIADB_API_VERSION, MARIADB_KIND)

    async def _password(self, loaded: Loaded, db: Database) -> tuple[str, str] | None:
        """The password and an id that changes with it (the Secret's resourceVersion), or None after saying why not."""
        where = f"Secret {loaded.namespace}/{db.password_secret} (key {db.password_key})"
        source = self.live(*SECRET, db.password_secret, loaded.namespace)
        encoded = ((source or {}).get("data") or {}).get(db.password_key)
        if source is None or encoded is None:
            await self._fail(loaded, "PasswordSecretMissing", f"the database password is missing: {where} not found")
            return None
        try:
            # A decoding error's message can quote bytes of the password: say only that it is not text.
            password = base64.b64decode(encoded, validate=True).decode()
        except (binascii.Error, UnicodeDecodeError):
            await self._fail(loaded, "InvalidPassword", f"the database password in {where} is not UTF-8 text")
            return None
        try:
            check_password(password)  # its messages never contain the password
        except ValueError as exc:
            await self._fail(loaded, "InvalidPassword", f"the database password in {where} cannot be used: {exc}")
            return None
        return password, str(source["metadata"].get("resourceVersion", ""))

    async def _fail(self, loaded: Loaded, reason: str, message: str) -> None:
        previous = loaded.cluster.status.condition(self.condition_type) if loaded.cluster.status else None
        if previous is None or previous.reason != reason or previous.message != message:
            self.warn(loaded, reason, message)
        await self.write_status(
            loaded, {"conditions": [self.condition(loaded, ok=False, reason=reason, message=message)]}
        )

    async def _remove(self, loaded: Loaded) -> None:
        """Disabling accounting removes slurmdbd. The database and its passwords hold data: they stay."""
        c = loaded.name
        for kind in (DEPLOYMENT, SERVICE, SECRET):
            await self.prune(loaded, *kind, component=COMPONENT, keep=[meta.mariadb_passwords(c)])
        status = loaded.cluster.status
        if status is not None and status.condition(self.condition_type) is not None:  # it was enabled once
            cond = self.condition(loaded, ok=False, reason="Disabled", message="spec.accounting.enabled is false")
            await self.write_status(loaded, {"conditions": [cond]})
