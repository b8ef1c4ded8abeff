"""The controller, login, rest, populate-jail, benchmark and cluster components' decisions as data: an observation
in, a plan out (the workers': test_workers_plan.py). No API server, no clock."""

from __future__ import annotations

import base64
from typing import Any

import pytest

from slurmctl.api.v1 import JAIL_POPULATED
from slurmctl.reconcilers import benchmark, cluster, controller, login, populate_jail, rest
from slurmctl.reconcilers.base import status_part
from slurmctl.reconcilers.keys import JWT_KEY_BYTES
from slurmctl.reconcilers.observation import Settings
from slurmctl.reconcilers.plan import Plan
from slurmctl.render import meta
from slurmctl.render.cluster import JWT_KEY
from slurmctl.render.kinds import DEPLOYMENT, JOB, SECRET, SERVICE, STATEFULSET, Kind
from slurmctl.render.sshd import HOST_KEY_TYPES, host_key_types
from test.unit.reconcilers.env import NAME, NS
from test.unit.reconcilers.plans import KEYS, loaded, observe


def child(kind: Kind, name: str, *, uid: str = "", **status: Any) -> dict[str, Any]:
    return {
        "apiVersion": kind.api_version,
        "kind": kind.kind,
        "metadata": {"name": name, "namespace": NS, "uid": uid or f"{name}-uid"},
        "status": status,
    }


def said(p: Plan) -> tuple[str, str, str]:
    assert p.status is not None
    cond = next(c for c in p.status.conditions if c.type == p.condition)
    return cond.status, cond.reason, cond.message


def kinds(p: Plan) -> list[tuple[str, str]]:
    return [(o["kind"], o["metadata"]["name"]) for o in p.apply]


def test_the_controller_waits_for_the_jwt_key_and_renders_nothing_meanwhile() -> None:
    p = controller.plan(observe(loaded(), keys={meta.munge_secret(NAME): "m"}))
    assert not p.apply
    assert said(p) == ("False", "WaitingForKeys", f"waiting for Secret {meta.jwt_key_secret(NAME)}")


def test_the_standby_statefulset_goes_once_the_standby_is_off_and_readiness_counts_the_primary() -> None:
    backup = meta.controller_backup(NAME)
    live = {
        meta.controller(NAME): child(STATEFULSET, meta.controller(NAME), readyReplicas=1),
        backup: child(STATEFULSET, backup),
    }
    p = controller.plan(observe(loaded(), children={STATEFULSET: live}))
    assert [(d.kind, d.name, d.uid) for d in p.delete] == [(STATEFULSET, backup, f"{backup}-uid")]
    assert said(p) == ("True", "Ready", "slurmctld is ready")
    assert p.status is not None and p.status.controller_ready == "1/1"


def test_a_controller_refused_at_admission_is_named_once() -> None:
    message = "StatefulSet c-controller: pods refused: violates PodSecurity baseline"
    live = {meta.controller(NAME): child(STATEFULSET, meta.controller(NAME))}
    first = controller.plan(observe(loaded(), children={STATEFULSET: live}, refusals={meta.controller(NAME): message}))
    assert said(first) == ("False", "PodRefused", message)
    assert [(n.type, n.reason) for n in first.events] == [("Warning", "PodRefused")]
    assert first.status is not None
    known = {"conditions": [first.status.conditions[0].model_dump(mode="json", by_alias=True, exclude_none=True)]}
    again = controller.plan(
        observe(loaded(), children={STATEFULSET: live}, refusals={meta.controller(NAME): message}, said=known)
    )
    assert again.events == (), "said already: no second Event"


def test_login_waits_for_the_jail_and_prunes_the_service_of_a_removed_login_pod() -> None:
    host_keys = meta.ssh_host_keys_secret(NAME)
    fields = {host_keys: ("ssh_host_ed25519_key", "ssh_host_ed25519_key.pub")}
    waiting = login.plan(observe(loaded(), jail_open=False, key_fields=fields))
    assert said(waiting) == ("False", "WaitingForJail", "waiting for the populate-jail Job to succeed")
    gone = f"{meta.login(NAME)}-7"
    p = login.plan(observe(loaded(), key_fields=fields, children={SERVICE: {gone: child(SERVICE, gone)}}))
    assert [d.name for d in p.delete] == [gone]
    assert ("StatefulSet", meta.login(NAME)) in kinds(p)


def test_rest_disabled_removes_its_objects_and_says_so_only_if_it_ran_before() -> None:
    name = meta.rest(NAME)
    live = {DEPLOYMENT: {name: child(DEPLOYMENT, name)}, SERVICE: {name: child(SERVICE, name)}}
    never = rest.plan(observe(loaded(rest={"enabled": False}), children=live))
    assert sorted(d.kind.kind for d in never.delete) == ["Deployment", "Service"]
    assert never.status is None and not never.apply
    ready = rest.plan(observe(loaded(), children={DEPLOYMENT: {name: child(DEPLOYMENT, name, availableReplicas=1)}}))
    assert said(ready) == ("True", "Ready", "slurmrestd is ready")


def test_the_populate_jail_job_runs_once_and_a_succeeded_one_opens_the_gate() -> None:
    first = populate_jail.plan(observe(loaded()))
    assert kinds(first) == [("Job", meta.populate_jail(NAME))]
    assert said(first)[1] == "Populating"
    done = child(JOB, meta.populate_jail(NAME), conditions=[{"type": "Complete", "status": "True"}], succeeded=1)
    p = populate_jail.plan(observe(loaded(), children={JOB: {meta.populate_jail(NAME): done}}))
    assert not p.apply, "a live Job is never re-applied"
    assert said(p) == ("True", "Populated", f"Job {meta.populate_jail(NAME)} populated the jail")
    assert p.condition == JAIL_POPULATED


def test_the_benchmark_is_disabled_without_gpu_groups() -> None:
    p = benchmark.plan(observe(loaded()))
    assert said(p) == ("False", "Disabled", "spec.healthChecks.ncclBenchmark.enabled is false")


def test_the_cluster_creates_only_the_missing_keys_and_never_one_someone_else_holds(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def never() -> Any:
        raise AssertionError("a plan never makes key material")

    for maker in ("new_munge_key", "new_jwt_key", "new_ssh_host_keys"):
        monkeypatch.setattr(cluster, maker, never)
    taken = meta.jwt_key_secret(NAME)
    p = cluster.plan(observe(loaded(), keys={meta.munge_secret(NAME): "m"}, foreign_keys=frozenset({taken})))
    assert len(p.create) == 1, "only the host keys: the munge key exists, the JWT name is someone else's"
    assert ("ConfigMap", meta.slurm_configs(NAME)) in kinds(p)
    assert said(p) == ("True", "Valid", "the spec is valid")
    assert p.status is not None and p.status.phase is None, "the status writer derives the phase as it writes"


async def test_the_host_keys_a_cluster_gets_are_the_operators_setting() -> None:
    """--ssh-rsa-host-keys reaches the plan through the observation's settings: the host keys Secret it makes holds
    an RSA key besides the default ones."""
    obs = observe(loaded(), keys={}, settings=Settings(host_key_types=HOST_KEY_TYPES))
    made = [await create.body() for create in cluster.plan(obs).create]
    (host_keys,) = [s for s in made if s["metadata"]["name"] == meta.ssh_host_keys_secret(NAME)]
    assert host_key_types(host_keys["data"]) == HOST_KEY_TYPES


JWT = meta.jwt_key_secret(NAME)


async def test_a_jwt_key_rotation_replaces_the_key_secret_once_per_request_value() -> None:
    """spec.jwtKeyRotation: a value the key Secret was not made for deletes it (that incarnation) and makes a new one,
    carrying the value, in the same pass; the Event and the status name the value; the same value is not handled
    again once the new Secret records it, and a new value is."""
    p = cluster.plan(observe(loaded(jwtKeyRotation="2026-12")))
    (gone,) = p.delete
    assert (gone.kind, gone.name, gone.uid) == (SECRET, JWT, f"{JWT}-uid")
    assert gone.event is not None and (gone.event.type, gone.event.reason) == ("Normal", "JWTKeyRotated")
    assert "'2026-12'" in gone.event.message and "the old key was made for the cluster" in gone.event.message
    (made,) = [await create.body() for create in p.create]
    assert made["metadata"]["name"] == JWT and made["immutable"] is True
    assert made["metadata"]["annotations"] == {meta.JWT_KEY_ROTATION_ANNOTATION: "2026-12"}
    assert len(base64.b64decode(made["data"][JWT_KEY])) == JWT_KEY_BYTES
    assert p.status is not None and p.status.jwt_key_rotation == "2026-12"

    handled = cluster.plan(observe(loaded(jwtKeyRotation="2026-12"), key_rotations={JWT: "2026-12"}))
    assert (handled.delete, handled.create) == ((), ())
    assert handled.status is not None and handled.status.jwt_key_rotation == "2026-12"

    again = cluster.plan(observe(loaded(jwtKeyRotation="2027-01"), key_rotations={JWT: "2026-12"}))
    (gone,) = again.delete
    assert gone.event is not None and "'2027-01'" in gone.event.message and "made for '2026-12'" in gone.event.message


async def test_no_jwt_key_rotation_without_a_request_and_none_of_a_key_that_is_missing_or_not_ours() -> None:
    """Without spec.jwtKeyRotation nothing is replaced (and the status says nothing of it). A key missing while a
    request stands is made once, for it (not made and then replaced); a Secret someone else holds is never touched."""
    plain = cluster.plan(observe(loaded()))
    assert plain.delete == ()
    assert plain.status is not None and "jwtKeyRotation" not in status_part(plain.status)

    keys = {name: uid for name, uid in KEYS.items() if name != JWT}
    missing = cluster.plan(observe(loaded(jwtKeyRotation="r1"), keys=keys))
    assert missing.delete == ()
    (made,) = [await create.body() for create in missing.create]
    assert made["metadata"]["annotations"] == {meta.JWT_KEY_ROTATION_ANNOTATION: "r1"}

    foreign = cluster.plan(observe(loaded(jwtKeyRotation="r1"), keys=keys, foreign_keys=frozenset({JWT})))
    assert (foreign.delete, foreign.create) == ((), ())
