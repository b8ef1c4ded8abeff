"""The `login` reconciler: gated on both keys and the jail; its ConfigMap, Services and StatefulSet; LoginReady."""

from __future__ import annotations

from slurmctl.render import meta
from slurmctl.render.kinds import CONFIGMAP, SECRET, SERVICE, STATEFULSET
from test.unit.reconcilers.env import NAME, SSH_KEY, Env, spec


async def test_login_waits_for_keys_and_jail_then_serves_ssh() -> None:
    async with Env() as env:
        env.create(spec())
        await env.run("login")
        assert env.reason("LoginReady") is None  # no keys yet, but the cluster component has not had its turn
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


async def test_each_login_pod_gets_a_service_of_its_name_which_goes_when_the_set_shrinks() -> None:
    """srun on a login pod names its host by the pod's short name, and slurmctld reaches the step's srun by it: a
    headless Service of the pod's name makes it resolve in the namespace (Kubernetes publishes no such name itself)."""
    async with Env() as env:
        env.create(spec())
        await env.converge()
        env.job_succeeds()
        env.edit(lambda s: s.update(login={"size": 2, "sshRootPublicKeys": [SSH_KEY]}))
        await env.converge()
        for i in (0, 1):
            svc = env.get(SERVICE, f"{NAME}-login-{i}")
            assert svc is not None and svc["spec"]["clusterIP"] == "None", svc
            assert svc["spec"]["selector"][meta.STATEFULSET_POD_NAME_LABEL] == f"{NAME}-login-{i}"
        env.edit(lambda s: s.update(login={"size": 1, "sshRootPublicKeys": [SSH_KEY]}))
        await env.converge()
        assert {n for n in env.names(SERVICE) if n.startswith(f"{NAME}-login")} == {
            f"{NAME}-login",
            f"{NAME}-login-headless",
            f"{NAME}-login-0",
        }


async def test_new_clusters_get_no_rsa_host_key_and_sshd_names_the_keys_the_secret_holds() -> None:
    async with Env() as env:
        env.create(spec())
        await env.run("cluster")
        keys = env.get(SECRET, f"{NAME}-ssh-host-keys")
        assert keys is not None
        assert sorted(keys["data"]) == [
            "ssh_host_ecdsa_key",
            "ssh_host_ecdsa_key.pub",
            "ssh_host_ed25519_key",
            "ssh_host_ed25519_key.pub",
        ]
        await env.converge()
        env.job_succeeds()
        await env.converge()
        sshd_config = env.get(CONFIGMAP, f"{NAME}-sshd")["data"]["sshd_config"]  # type: ignore[index]
        assert [line for line in sshd_config.splitlines() if line.startswith("HostKey")] == [
            "HostKey /etc/ssh/ssh_host_ed25519_key",
            "HostKey /etc/ssh/ssh_host_ecdsa_key",
        ]


async def test_a_cluster_created_with_an_rsa_host_key_keeps_serving_it() -> None:
    async with Env() as env:
        created = env.create(spec())
        # As an older operator made it: its labels are what the operator's Secret informer selects on.
        env.secret(
            f"{NAME}-ssh-host-keys",
            {f"ssh_host_{t}_key": b"k" for t in ("ed25519", "ecdsa", "rsa")},
            labels=meta.labels(NAME, "cluster"),
            owner=created["metadata"]["uid"],
        )
        await env.converge()
        env.job_succeeds()
        await env.converge()
        sshd_config = env.get(CONFIGMAP, f"{NAME}-sshd")["data"]["sshd_config"]  # type: ignore[index]
        assert "HostKey /etc/ssh/ssh_host_rsa_key" in sshd_config.splitlines()
