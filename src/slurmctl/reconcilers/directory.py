"""The `directory` component: DirectoryReachable, the operator's own look at spec.identity.directory.

The sssd sidecars (render/sssd.py) are what resolves users; they say what goes wrong only in their logs and in failed
logins. So the operator binds to the directory itself, as they would: every URI in order until one accepts, over TLS
with the given CA, as the bind DN with the password from its Secret, each attempt within PROBE_SECONDS
(reconcilers/directory_probe.py). The condition names the field to look at, and each new finding is one Warning
Event. It owns no object and does not count for the phase: the jail's own users still log in and run jobs while the
directory is down. It looks again every RECHECK_SECONDS.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
from dataclasses import dataclass, field
from typing import Any

from slurmctl.api.v1 import DIRECTORY_REACHABLE, Reason, SlurmClusterStatus
from slurmctl.api.v1.identity import Directory
from slurmctl.reconcilers.base import ComponentReconciler
from slurmctl.reconcilers.directory_probe import Outcome, ProbeResult, probe
from slurmctl.reconcilers.loading import Loaded
from slurmctl.reconcilers.observation import Observation
from slurmctl.reconcilers.plan import Plan
from slurmctl.render.kinds import CONFIGMAP, SECRET, Kind
from slurmctl.runtime import NotFound

PROBE_SECONDS = 5.0
RECHECK_SECONDS = 30.0
# While it fails, sooner: the condition should follow the directory's return within a sssd retry or two.
RETRY_SECONDS = 15.0
FIELD = "spec.identity.directory"
# The worst finding first: the one the condition reports when no URI accepts.
_REASONS = {
    Outcome.BIND_REFUSED: (Reason.DIRECTORY_BIND_REFUSED, f"{FIELD}.bindDN / bindPasswordSecretRef"),
    Outcome.TLS_REFUSED: (Reason.DIRECTORY_CERTIFICATE_REFUSED, f"{FIELD}.ca"),
    Outcome.NOT_LDAP: (Reason.DIRECTORY_UNREACHABLE, f"{FIELD}.uris"),
    Outcome.UNREACHABLE: (Reason.DIRECTORY_UNREACHABLE, f"{FIELD}.uris"),
}


@dataclass(frozen=True)
class Credentials:
    """The bind password and the CA, read from the user's objects, or why they cannot be (`problem`, naming the
    field; it never quotes the password)."""

    password: str = field(default="", repr=False)
    ca_pem: str | None = None
    problem: str | None = None


@dataclass(frozen=True)
class DirectoryObservation(Observation):
    """The component's observation, plus the credentials and one probe per URI tried (in order, up to the first that
    accepted); empty without a directory."""

    credentials: Credentials = field(default_factory=Credentials)
    results: tuple[ProbeResult, ...] = ()

    @classmethod
    def of(cls, base: Observation, **facts: Any) -> DirectoryObservation:
        return cls(**{f.name: getattr(base, f.name) for f in dataclasses.fields(base)}, **facts)


def _value(obj: dict[str, Any] | None, key: str, *, secret: bool) -> str | None:
    """A key's text from a Secret (base64) or ConfigMap; None when missing or not UTF-8."""
    if obj is None:
        return None
    if not secret:
        data = obj.get("data") or {}
        value = data.get(key)
        return value if isinstance(value, str) else None
    encoded = (obj.get("data") or {}).get(key)
    if not isinstance(encoded, str):
        return None
    try:
        return base64.b64decode(encoded, validate=True).decode()
    except (binascii.Error, UnicodeDecodeError):
        return None


class DirectoryReconciler(ComponentReconciler):
    async def _get(self, kind: Kind, name: str, namespace: str) -> dict[str, Any] | None:
        try:
            found: dict[str, Any] = await self.manager.client.get(*kind, name, namespace=namespace)
        except NotFound:
            return None
        return found

    async def _credentials(self, loaded: Loaded, directory: Directory) -> Credentials:
        ns = loaded.namespace
        password = ""
        if (ref := directory.bind_password_secret_ref) is not None:
            value = _value(await self._get(SECRET, ref.name, ns), ref.key, secret=True)
            if value is None:
                where = f"{FIELD}.bindPasswordSecretRef"
                return Credentials(problem=f"{where}: Secret {ns}/{ref.name} has no UTF-8 key {ref.key!r}")
            password = value
        ca_pem = None
        if directory.ca is not None:
            if (cm := directory.ca.config_map_key_ref) is not None:
                ca_pem = _value(await self._get(CONFIGMAP, cm.name, ns), cm.key, secret=False)
                what = f"ConfigMap {ns}/{cm.name} has no key {cm.key!r}"
            elif (sec := directory.ca.secret_key_ref) is not None:
                ca_pem = _value(await self._get(SECRET, sec.name, ns), sec.key, secret=True)
                what = f"Secret {ns}/{sec.name} has no UTF-8 key {sec.key!r}"
            if ca_pem is None:
                return Credentials(problem=f"{FIELD}.ca: {what}")
        return Credentials(password=password, ca_pem=ca_pem)

    async def observe(self, loaded: Loaded) -> DirectoryObservation:
        """The credentials, then one bind per URI in order until one accepts (none without a directory, or when the
        credentials cannot be read)."""
        obs = DirectoryObservation.of(await super().observe(loaded))
        directory = loaded.cluster.spec.identity.directory
        if directory is None:
            return obs
        credentials = await self._credentials(loaded, directory)
        results: list[ProbeResult] = []
        if credentials.problem is None:
            for uri in directory.uris:
                result = await probe(
                    uri,
                    start_tls=directory.start_tls,
                    ca_pem=credentials.ca_pem,
                    dn=directory.bind_dn or "",
                    password=credentials.password,
                    deadline_seconds=PROBE_SECONDS,
                )
                results.append(result)
                if result.outcome is Outcome.OK:
                    break
        return dataclasses.replace(obs, credentials=credentials, results=tuple(results))


def plan(obs: Observation) -> Plan:
    assert isinstance(obs, DirectoryObservation), "DirectoryReconciler.observe makes the directory's observation"
    directory = obs.loaded.cluster.spec.identity.directory
    if directory is None:
        if obs.loaded.condition(DIRECTORY_REACHABLE) is None:  # never set: nothing to say
            return Plan(DIRECTORY_REACHABLE)
        return obs.report(DIRECTORY_REACHABLE, ok=False, reason=Reason.DISABLED, message=f"{FIELD} is not set")
    if obs.credentials.problem is not None:
        reason, message = Reason.DIRECTORY_SECRET_MISSING, obs.credentials.problem
    elif (ok := next((r for r in obs.results if r.outcome is Outcome.OK), None)) is not None:
        cond = obs.condition(DIRECTORY_REACHABLE, ok=True, reason=Reason.REACHABLE, message=f"{ok.uri}: bind accepted")
        return Plan(DIRECTORY_REACHABLE, status=SlurmClusterStatus(conditions=[cond]), requeue_after=RECHECK_SECONDS)
    else:
        worst = min(obs.results, key=lambda r: list(_REASONS).index(r.outcome))
        reason, where = _REASONS[worst.outcome]
        tried = "; ".join(f"{r.uri}: {r.detail}" for r in obs.results)
        message = f"{where}: {tried}"
    cond = obs.condition(DIRECTORY_REACHABLE, ok=False, reason=reason, message=message)
    return Plan(
        DIRECTORY_REACHABLE,
        events=obs.warn_once(DIRECTORY_REACHABLE, reason, message),
        status=SlurmClusterStatus(conditions=[cond]),
        requeue_after=RETRY_SECONDS,
    )
