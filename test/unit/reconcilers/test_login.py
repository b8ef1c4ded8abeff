"""The `login` reconciler: gated on both keys and the jail; its ConfigMap, Services and StatefulSet; LoginReady."""

from __future__ import annotations

from slurmctl.render.kinds import CONFIGMAP, SERVICE, STATEFULSET
from test.unit.reconcilers.env import NAME, SSH_KEY, Env, spec


async def test_login_waits_for_keys_and_jail_then_serves_ssh() -> None:
    async with Env() as env:
        env.create(spec())
        await env.run("login")
        assert env.reason("LoginReady") == ("False", "WaitingForKeys")
        await env.run("cluster", "populate-jail", "login")
        assert env.reason("LoginReady") == ("False", "WaitingForJail")
        assert f"{NAME}-login" not in env.names(STATEFULSET)
        env.job_succeeds()
        await env.run("login")
        assert f"{NAME}-login" in env.names(STATEFULSET)
        assert {f"{NAME}-login", f"{NAME}-login-headless"} <= set(env.names(SERVICE))
        sshd = env.get(CONFIGMAP, f"{NAME}-sshd")
        assert sshd is not None and sshd["data"]["authorized_keys"].startswith(SSH_KEY)
        assert env.reason("LoginReady") == ("False", "NotReady")
        env.pods_ready()
        await env.run("login")
        assert env.reason("LoginReady") == ("True", "Ready")
        assert env.cluster()["status"]["loginReady"] == "1/1"


async def test_an_existing_login_keeps_running_while_the_jail_is_overwritten() -> None:
    async with Env() as env:
        env.create(spec())
        await env.converge()
        env.job_succeeds()
        await env.converge()
        env.edit(
            lambda s: s.update(populateJail={"overwrite": True}, login={"size": 2, "sshRootPublicKeys": [SSH_KEY]})
        )
        await env.run("populate-jail", "login")
        assert env.reason("JailPopulated") == ("False", "Overwriting")
        assert env.get(STATEFULSET, f"{NAME}-login")["spec"]["replicas"] == 2  # type: ignore[index]
