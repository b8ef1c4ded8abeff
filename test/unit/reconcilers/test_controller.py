"""The `controller` reconciler: slurmctld's StatefulSet and Service, gated on the munge key; ControllerReady."""

from __future__ import annotations

from slurmctl.render.kinds import SERVICE, STATEFULSET
from test.unit.reconcilers.env import NAME, NS, Env, spec


async def test_waits_for_the_munge_key_then_applies_slurmctld() -> None:
    async with Env() as env:
        env.create(spec())
        await env.run("controller")
        assert env.reason("ControllerReady") is None  # the cluster component has not had its turn: nothing to say
        assert env.fake.of_kind(*STATEFULSET) == []
        await env.run("cluster", "controller")
        assert env.names(STATEFULSET) == [f"{NAME}-controller"]
        assert f"{NAME}-controller" in env.names(SERVICE)
        assert env.reason("ControllerReady") == ("False", "NotReady")
        assert env.cluster()["status"]["controllerReady"] == "0/1"
        env.pods_ready()
        await env.run("controller")
        assert env.reason("ControllerReady") == ("True", "Ready")
        assert env.cluster()["status"]["controllerReady"] == "1/1"
        mark = env.mark()
        await env.run("controller")
        assert env.writes_since(mark) == []


async def test_a_new_munge_key_rolls_slurmctld_and_size_zero_is_stopped() -> None:
    async with Env() as env:
        env.create(spec())
        await env.run("cluster", "controller")
        sts = env.get(STATEFULSET, f"{NAME}-controller")
        assert sts is not None
        before = sts["spec"]["template"]["metadata"]["annotations"]["slurm.slurmctl.io/config-hash"]
        await env.fake.delete("v1", "Secret", f"{NAME}-munge", namespace="hpc")
        await env.run("cluster", "controller")
        sts = env.get(STATEFULSET, f"{NAME}-controller")
        assert sts is not None
        assert sts["spec"]["template"]["metadata"]["annotations"]["slurm.slurmctl.io/config-hash"] != before
        env.edit(lambda s: s.update(controller={"size": 0}))
        await env.run("controller")
        assert env.reason("ControllerReady") == ("False", "Stopped")


async def test_a_key_missing_after_the_cluster_component_created_it_is_reported() -> None:
    async with Env() as env:
        env.create(spec())
        await env.run("cluster", "controller")
        await env.fake.delete("v1", "Secret", f"{NAME}-munge", namespace=NS)
        await env.run("controller")
        assert env.reason("ControllerReady") == ("False", "WaitingForKeys")
