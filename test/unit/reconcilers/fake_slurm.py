"""The in-memory Slurm (test/fake_slurm/model.py) wired into the reconcilers' unit tests: `connect` routes a test
environment's Slurm calls to it (the client itself is tested against recorded answers in test/unit/slurm)."""

from __future__ import annotations

from slurmctl.reconcilers.slurm_access import SlurmAccess
from slurmctl.render import meta
from slurmctl.render.cluster import JWT_KEY
from slurmctl.render.kinds import SECRET
from slurmctl.runtime.clock import Clock
from test.fake_slurm.model import FakeSlurm
from test.unit.reconcilers.env import NAME, NS, Env

__all__ = ["EveryLookIsLater", "FakeSlurm", "connect", "rest_pod"]


class EveryLookIsLater:
    """A clock on which every look is a poll interval after the last: each reader takes a new Slurm snapshot, so a
    test that changes the fake Slurm sees the change on its next pass (the sharing itself is tested on a fake
    clock)."""

    def __init__(self) -> None:
        self._now = 0.0

    def monotonic(self) -> float:
        self._now += 3600.0
        return self._now

    async def sleep(self, seconds: float) -> None:
        raise AssertionError("the Slurm access never sleeps")


def rest_pod(name: str = NAME) -> str:
    """The name of the ready slurmrestd pod `connect` gives a cluster (its Deployment's ReplicaSet controls it)."""
    return f"{meta.rest(name)}-5d8f-x2x9z"


def connect(env: Env, slurm: FakeSlurm, *, name: str = NAME, clock: Clock | None = None) -> None:
    """Give the cluster a ready slurmrestd pod and a JWT key, and route the operator's Slurm calls to `slurm` (the
    pod's address, on loopback, is never connected to). `clock`: the one snapshots age on (default: every reader
    reads)."""
    env.fake.put(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": rest_pod(name),
                "namespace": NS,
                "labels": meta.labels(name, "rest"),
                "ownerReferences": [
                    {
                        "apiVersion": "apps/v1",
                        "kind": "ReplicaSet",
                        "name": f"{meta.rest(name)}-5d8f",
                        "controller": True,
                    }
                ],
            },
            "status": {"podIP": "127.0.0.9", "conditions": [{"type": "Ready", "status": "True"}]},
        }
    )
    if env.get(SECRET, meta.jwt_key_secret(name)) is None:  # the cluster reconciler's, when it made it already
        env.secret(meta.jwt_key_secret(name), {JWT_KEY: b"k" * 32}, labels=meta.labels(name, "cluster"))
    access = SlurmAccess(
        env.manager.cache,
        connect=lambda url, token: slurm,
        clock=clock or EveryLookIsLater(),
        registry=env.manager.metrics.registry,
    )
    for listener in env.ctx.slurm.listeners:  # who the registry said a new snapshot wakes
        access.listen(listener)
    env.ctx.slurm = access
