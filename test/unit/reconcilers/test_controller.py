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


async def test_a_standby_is_a_second_statefulset_counted_in_controller_ready_and_goes_when_turned_off() -> None:
    async with Env() as env:
        env.create(spec(controller={"standby": True}))
        await env.run("cluster", "controller")
        primary, backup = f"{NAME}-controller", f"{NAME}-controller-backup"
        assert env.names(STATEFULSET) == [primary, backup]
        assert env.cluster()["status"]["controllerReady"] == "0/2"
        env.fake.set_status(*STATEFULSET, primary, {"readyReplicas": 1}, namespace=NS)
        await env.run("controller")
        assert env.reason("ControllerReady") == ("False", "NotReady")
        assert "no failover until it is" in env.condition("ControllerReady")["message"]
        assert env.cluster()["status"]["controllerReady"] == "1/2"
        # The primary's node is gone: the standby is ready and takes control.
        env.fake.set_status(*STATEFULSET, primary, {"readyReplicas": 0}, namespace=NS)
        env.fake.set_status(*STATEFULSET, backup, {"readyReplicas": 1}, namespace=NS)
        await env.run("controller")
        assert "takes control once the primary has not answered" in env.condition("ControllerReady")["message"]
        env.pods_ready()
        await env.run("controller")
        assert env.reason("ControllerReady") == ("True", "Ready")
        assert env.cluster()["status"]["controllerReady"] == "2/2"
        env.edit(lambda s: s.update(controller={"standby": False}))
        await env.run("controller")
        assert env.names(STATEFULSET) == [primary]
        assert env.cluster()["status"]["controllerReady"] == "1/1"
