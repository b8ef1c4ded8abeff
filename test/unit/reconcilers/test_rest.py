"""The `rest` reconciler: slurmrestd's Deployment and Service, RestReady, and switching it off."""

from __future__ import annotations

from slurmctl.render import meta
from slurmctl.render.kinds import DEPLOYMENT, POD, SECRET, SERVICE
from test.unit.reconcilers.env import NAME, NS, Env, spec
from test.unit.reconcilers.fake_slurm import FakeSlurm, connect, rest_pod


async def test_slurmrestd_is_served_by_default_and_ready_when_its_pod_is() -> None:
    async with Env() as env:
        env.create(spec())
        await env.converge()
        assert f"{NAME}-rest" in env.names(DEPLOYMENT)
        assert f"{NAME}-rest" in env.names(SERVICE)
        assert env.reason("RestReady") == ("False", "NotReady")
        env.job_succeeds()
        await env.converge()
        env.pods_ready()
        await env.converge()
        assert env.reason("RestReady") == ("True", "Ready")
        assert env.phase() == "Available"


async def test_the_phase_waits_for_slurmrestd() -> None:
    async with Env() as env:
        await env.available()
        assert env.phase() == "Available"
        env.fake.set_status(*DEPLOYMENT, f"{NAME}-rest", {"availableReplicas": 0}, namespace="hpc")
        await env.converge()
        assert env.reason("RestReady") == ("False", "NotReady")
        assert env.phase() == "Degraded"


async def test_disabling_rest_removes_slurmrestd_but_keeps_the_jwt_key() -> None:
    async with Env() as env:
        await env.available()
        key = env.get(SECRET, f"{NAME}-jwt-key")
        assert key is not None
        env.edit(lambda s: s.update(rest={"enabled": False}))
        await env.converge()
        assert f"{NAME}-rest" not in env.names(DEPLOYMENT)
        assert f"{NAME}-rest" not in env.names(SERVICE)
        assert env.reason("RestReady") == ("False", "Disabled")
        assert env.phase() == "Available", "a disabled component does not count for Available"
        assert env.get(SECRET, f"{NAME}-jwt-key") == key, "slurmctld still verifies users' tokens with it"


async def test_a_cluster_created_without_rest_never_gets_a_rest_condition() -> None:
    async with Env() as env:
        env.create(spec(rest={"enabled": False}))
        await env.converge()
        assert env.reason("RestReady") is None
        assert f"{NAME}-rest" not in env.names(DEPLOYMENT)


async def test_a_pod_with_slurmrestds_labels_only_never_gets_the_operators_questions() -> None:
    """The operator asks (with a SlurmUser token) only a pod that its own slurmrestd Deployment's ReplicaSet controls:
    a ready look-alike with the same labels, listed first, is passed over, and alone it is no slurmrestd at all."""
    async with Env() as env:
        await env.available()
        connect(env, FakeSlurm())
        access = env.ctx.slurm
        look_alike = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": f"{NAME}-rest-0", "namespace": NS, "labels": meta.labels(NAME, "rest")},
            "status": {"podIP": "127.0.0.66", "conditions": [{"type": "Ready", "status": "True"}]},
        }
        env.fake.put(look_alike)
        assert access.address(NAME, NS) == "127.0.0.9"
        await env.fake.delete(*POD, rest_pod(), namespace=NS)
        assert access.address(NAME, NS) is None
        look_alike["metadata"]["ownerReferences"] = [
            {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "someone-elses-5d8f", "controller": True}
        ]
        env.fake.put(look_alike)
        assert access.address(NAME, NS) is None
