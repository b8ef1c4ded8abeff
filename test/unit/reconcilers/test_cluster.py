"""The `cluster` reconciler: key Secrets created once, the configs ConfigMap, SpecValid and the phase."""

from __future__ import annotations

import asyncio
import base64
from collections.abc import Callable, Mapping
from typing import Any

import jwt
import pytest

from slurmctl.reconcilers.loading import Loaded
from slurmctl.reconcilers.slurm_access import SlurmAccess
from slurmctl.render import meta
from slurmctl.render.cluster import JWT_KEY
from slurmctl.render.kinds import CONFIGMAP, POD, ROLE, ROLE_BINDING, SECRET, STATEFULSET
from slurmctl.render.power import power_name, render_power_objects
from slurmctl.runtime import NotFound, Request
from slurmctl.runtime.errors import ApiError
from test.unit.reconcilers.env import NAME, NS, Env, spec
from test.unit.reconcilers.fake_slurm import FakeSlurm
from test.unit.reconcilers.fake_slurm import connect as connect_rest


async def test_keys_and_configs_are_created_owned_by_the_cluster_and_never_rotated() -> None:
    async with Env() as env:
        uid = env.create(spec())["metadata"]["uid"]
        await env.run("cluster")
        assert env.names(SECRET) == [f"{NAME}-jwt-key", f"{NAME}-munge", f"{NAME}-ssh-host-keys"]
        assert env.names(CONFIGMAP) == [f"{NAME}-power", f"{NAME}-slurm-configs"]
        for obj in [*env.fake.of_kind(*SECRET), *env.fake.of_kind(*CONFIGMAP)]:
            (owner,) = obj["metadata"]["ownerReferences"]
            assert (owner["uid"], owner["controller"]) == (uid, True)
            assert obj["metadata"]["labels"]["app.kubernetes.io/component"] == "cluster"
        munge = env.get(SECRET, f"{NAME}-munge")
        assert munge is not None
        assert len(base64.b64decode(munge["data"]["munge.key"])) == 1024
        jwt = env.get(SECRET, f"{NAME}-jwt-key")
        assert jwt is not None
        assert len(base64.b64decode(jwt["data"]["jwt_hs256.key"])) == 32
        assert env.reason("SpecValid") == ("True", "Valid")
        env.edit(lambda s: s["workers"].append({"name": "extra", "size": 1}))
        await env.converge()
        assert env.get(SECRET, f"{NAME}-munge") == munge, "a key pods use is never rewritten"
        assert env.get(SECRET, f"{NAME}-jwt-key") == jwt, "a key pods use is never rewritten"
        configs = env.get(CONFIGMAP, f"{NAME}-slurm-configs")
        assert configs is not None
        assert "NodeSet=extra Feature=extra\n" in configs["data"]["nodes.conf"]


async def test_a_converged_cluster_costs_no_write_and_no_event() -> None:
    async with Env() as env:
        await env.available()
        assert env.phase() == "Available"
        mark, events = env.mark(), env.events()
        await env.run()
        await env.run()
        assert env.writes_since(mark) == []
        assert env.events() == events


async def test_an_invalid_spec_fails_names_the_field_and_changes_no_child() -> None:
    async with Env() as env:
        env.create(spec(partitions=[{"name": "main", "workers": ["nope"]}]))
        await env.run()
        cond = env.condition("SpecValid")
        assert cond is not None
        assert (cond["status"], cond["reason"]) == ("False", "InvalidSpec")
        assert "spec.partitions[0].workers" in cond["message"]
        assert env.phase() == "Failed"
        assert env.fake.of_kind(*STATEFULSET) == [] and env.fake.of_kind(*SECRET) == []
        assert [(t, r) for t, r, _ in env.events()] == [("Warning", "InvalidSpec")]
        mark = env.mark()
        await env.run()
        assert env.writes_since(mark) == [], "the same problem is reported once"
        env.edit(lambda s: s.pop("partitions"))
        await env.converge()
        assert env.reason("SpecValid") == ("True", "Valid")
        assert env.phase() in ("Pending", "Reconciling")


async def test_an_invalid_spec_reconciled_again_before_its_status_is_written_records_one_event() -> None:
    """A second pass while the first one's status is still in the writer's window (the cache does not show it yet)."""
    async with Env() as env:
        env.create(spec(partitions=[{"name": "main", "workers": ["nope"]}]))
        cluster = env.ctx.reconcilers["cluster"]
        await cluster(Request(NS, NAME))
        await cluster(Request(NS, NAME))
        await env.ctx.status.flush()
        await env.manager.recorder.flush()
        events = env.fake.of_kind("v1", "Event")
        assert [(e["type"], e["reason"], e.get("count", 1)) for e in events] == [("Warning", "InvalidSpec", 1)]
        assert env.reason("SpecValid") == ("False", "InvalidSpec")


async def test_an_invalid_spec_reconciled_again_while_its_status_write_is_in_flight_records_one_event() -> None:
    """A second pass while the API server has not answered the status write yet (CI under load: a resync came first,
    and the same invalid spec was warned about twice)."""
    async with Env() as env:
        env.create(spec(partitions=[{"name": "main", "workers": ["nope"]}]))
        cluster = env.ctx.reconcilers["cluster"]
        apply_status, started, answer = env.manager.apply_status, asyncio.Event(), asyncio.Event()

        async def slow_apply_status(*args: Any, **kwargs: Any) -> dict[str, Any]:
            started.set()
            await answer.wait()
            return await apply_status(*args, **kwargs)

        env.manager.apply_status = slow_apply_status  # type: ignore[method-assign]
        await cluster(Request(NS, NAME))
        flushing = asyncio.create_task(env.ctx.status.flush())
        await asyncio.wait_for(started.wait(), timeout=5)
        await cluster(Request(NS, NAME))  # the write is in flight
        answer.set()
        await flushing
        await env.manager.recorder.flush()
        events = env.fake.of_kind("v1", "Event")
        assert [(e["type"], e["reason"], e.get("count", 1)) for e in events] == [("Warning", "InvalidSpec", 1)]
        assert env.reason("SpecValid") == ("False", "InvalidSpec")


async def test_a_key_secret_this_cluster_did_not_create_is_never_used_and_its_own_comes_once_it_is_gone() -> None:
    """A cluster deleted and re-created under the same name before the garbage collector removed the first one's
    children: its pods never start on the predecessor's keys (they would change under them once collected), nor on
    a key someone planted before the cluster existed."""
    async with Env() as env:
        env.create(spec())
        predecessor = {"munge.key": b"m" * 1024}
        env.secret(f"{NAME}-munge", predecessor, labels=meta.labels(NAME, "cluster"), owner="uid-of-the-deleted-one")
        await env.converge()
        assert env.names(STATEFULSET) == [], "no pod may start on a key this cluster did not create"
        cond = env.condition("ControllerReady")
        assert cond is not None and cond["reason"] == "WaitingForKeys", cond
        assert f"waiting for Secret {NAME}-munge to be deleted" in cond["message"]
        await env.fake.delete(*SECRET, f"{NAME}-munge", namespace=NS)  # the garbage collector
        await env.converge()
        munge = env.get(SECRET, f"{NAME}-munge")
        assert munge is not None and munge["immutable"] is True
        assert base64.b64decode(munge["data"]["munge.key"]) != predecessor["munge.key"]
        assert f"{NAME}-controller" in env.names(STATEFULSET)


async def test_a_jwt_key_rotation_replaces_the_key_once_rolls_slurmctld_and_the_operators_tokens_follow() -> None:
    """spec.jwtKeyRotation end to end in the operator: a new key Secret (new uid, the request recorded on it), an
    Event naming the request, slurmctld's pod template rolled (slurmdbd's too: test_rest.py), the status naming the
    request, and the operator's next token signed with the new key, refused by the old; the request handled once."""
    async with Env() as env:
        await env.available()
        name = meta.jwt_key_secret(NAME)
        old = env.get(SECRET, name)
        assert old is not None
        tokens: list[Callable[[], str]] = []

        def connect(url: str, token: Callable[[], str]) -> Any:
            tokens.append(token)
            return object()

        connect_rest(env, FakeSlurm())
        access = SlurmAccess(env.manager.cache, connect=connect)
        access.client(NAME, NS)

        def template_hash() -> str:
            sts = env.get(STATEFULSET, meta.controller(NAME))
            assert sts is not None
            return str(sts["spec"]["template"]["metadata"]["annotations"][meta.CONFIG_HASH_ANNOTATION])

        rolled_from = template_hash()
        env.edit(lambda s: s.update(jwtKeyRotation="2026-12-03"))
        await env.converge()
        new = env.get(SECRET, name)
        assert new is not None and new["metadata"]["uid"] != old["metadata"]["uid"]
        assert new["metadata"]["annotations"] == {meta.JWT_KEY_ROTATION_ANNOTATION: "2026-12-03"}
        old_key, new_key = (base64.b64decode(s["data"][JWT_KEY]) for s in (old, new))
        assert old_key != new_key
        assert template_hash() != rolled_from, "slurmctld loads the key only when it starts"
        assert env.cluster()["status"]["jwtKeyRotation"] == "2026-12-03"
        rotated = [e for e in env.events() if e[1] == "JWTKeyRotated"]
        assert len(rotated) == 1 and "'2026-12-03'" in rotated[0][2], rotated

        access.client(NAME, NS)
        fresh = tokens[-1]()
        assert jwt.decode(fresh, new_key, algorithms=["HS256"])["sun"] == "slurm"
        with pytest.raises(jwt.InvalidSignatureError):
            jwt.decode(fresh, old_key, algorithms=["HS256"])

        mark = env.mark()
        await env.run()
        assert env.writes_since(mark) == [], "a request is handled once"


async def test_a_removed_groups_node_set_and_partition_stay_in_nodes_conf_until_its_statefulset_is_gone() -> None:
    """The cluster component reads which removed groups still have a StatefulSet (their nodes drain) and holds their
    node sets and dropped partitions in the configs ConfigMap (render/slurm_conf.py hold_removed_groups); the
    StatefulSet's deletion wakes it (a watch) and the held lines go."""
    async with Env() as env:
        body = spec()
        body["workers"].append({"name": "extra", "size": 1, "resources": {"requests": {"cpu": 1}}})
        body["partitions"] = [
            {"name": "main", "default": True, "workers": ["cpu"]},
            {"name": "x", "workers": ["extra"]},
        ]
        await env.available(body)

        def nodes_conf() -> str:
            configs = env.get(CONFIGMAP, meta.slurm_configs(NAME))
            assert configs is not None
            return str(configs["data"]["nodes.conf"])

        assert "PartitionName=x Nodes=extra Default=NO State=UP" in nodes_conf()

        def drop(s: dict[str, Any]) -> None:
            s["workers"].pop()
            s["partitions"] = [{"name": "main", "default": True}]

        env.edit(drop)
        await env.run("cluster")
        held = nodes_conf().splitlines()
        assert "PartitionName=main Nodes=cpu Default=YES State=UP" in held
        assert held[-2:] == ["NodeSet=extra Feature=extra", "PartitionName=x Nodes=extra Default=NO State=UP"]

        await env.fake.delete(*STATEFULSET, meta.worker_group(NAME, "extra"), namespace=NS)
        await env.run("cluster")
        assert "extra" not in nodes_conf()


async def test_an_elastic_node_the_spec_no_longer_has_stays_in_nodes_conf_until_its_pod_is_gone() -> None:
    """`max` lowered from 3 to 1 while node 2 of the group has a pod (the drain gate lets it finish its jobs): its CLOUD
    node stays defined in the configs ConfigMap, as the group's nodes were, before the node sets; the pod's deletion
    wakes the cluster component and the line goes (render/slurm_conf.py hold_elastic_nodes)."""
    async with Env() as env:
        burst = {"name": "burst", "resources": {"requests": {"cpu": 1}}, "autoscale": {"max": 3}}
        env.create(spec(workers=[*spec()["workers"], burst]))
        await env.run("cluster")
        node = f"{meta.worker_group(NAME, 'burst')}-2"
        cluster = env.cluster()
        owner = {"apiVersion": cluster["apiVersion"], "kind": "SlurmCluster", "name": NAME,
                 "uid": cluster["metadata"]["uid"], "controller": True}  # fmt: skip
        labels = meta.labels(NAME, "workers", **{meta.LABEL_WORKER_GROUP: "burst"})
        env.fake.put({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": node, "namespace": NS, "labels": labels,
                                                                    "ownerReferences": [owner]}})  # fmt: skip

        def nodes_conf() -> list[str]:
            configs = env.get(CONFIGMAP, meta.slurm_configs(NAME))
            assert configs is not None
            return str(configs["data"]["nodes.conf"]).splitlines()

        defined = next(line for line in nodes_conf() if line.startswith(f"NodeName={meta.worker_group(NAME, 'burst')}"))
        assert defined.startswith(f"NodeName={meta.worker_group(NAME, 'burst')}-[0-2] State=CLOUD")

        def lower(s: dict[str, Any]) -> None:
            s["workers"][1]["autoscale"]["max"] = 1

        env.edit(lower)
        await env.run("cluster")
        held = nodes_conf()
        line = f"NodeName={node} {defined.split(' ', 1)[1]}"
        assert line in held and held.index(line) < held.index("NodeSet=burst Feature=burst")
        assert f"NodeName={meta.worker_group(NAME, 'burst')}-0 State=CLOUD" in "\n".join(held)

        await env.fake.delete(*POD, node, namespace=NS)
        await env.run("cluster")
        assert not any(node in line for line in nodes_conf())


async def test_a_group_made_elastic_stays_fixed_in_slurms_config_until_its_statefulset_and_pods_are_gone() -> None:
    """A fixed group switched to elastic (reconcilers/group_switch.py): while its StatefulSet or a pod of it is there
    (dynamic nodes that may run jobs), nodes.conf has no CLOUD line and no power partition for it, which slurmctld's
    reconfigure would give the names of running dynamic nodes; the last of them gone, the group is elastic there."""
    async with Env() as env:
        body = spec()
        body["workers"].append({"name": "extra", "size": 1, "resources": {"requests": {"cpu": 1}}})
        await env.available(body)
        group = meta.worker_group(NAME, "extra")
        labels = meta.labels(NAME, "workers", **{meta.LABEL_WORKER_GROUP: "extra"})
        env.fake.put({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": f"{group}-0", "namespace": NS,
                                                                    "labels": labels}})  # fmt: skip

        def nodes_conf() -> str:
            configs = env.get(CONFIGMAP, meta.slurm_configs(NAME))
            assert configs is not None
            return str(configs["data"]["nodes.conf"])

        def elastic(s: dict[str, Any]) -> None:
            s["workers"][1]["autoscale"] = {"max": 2}

        env.edit(elastic)
        await env.run("cluster")
        assert "NodeSet=extra Feature=extra" in nodes_conf()
        assert group not in nodes_conf() and "slurmctl-power-extra" not in nodes_conf()

        await env.fake.delete(*STATEFULSET, group, namespace=NS)
        await env.run("cluster")
        assert group not in nodes_conf(), "its pod is still there"

        await env.fake.delete(*POD, f"{group}-0", namespace=NS)
        await env.run("cluster")
        assert f"NodeName={group}-[0-1] State=CLOUD Feature=extra" in nodes_conf()
        assert "PartitionName=slurmctl-power-extra" in nodes_conf()


async def test_a_role_binding_is_applied_after_the_role_it_names_whatever_the_order_given() -> None:
    """RBAC resolves a RoleBinding's role when the binding is created (NotFound before the Role exists), unlike every
    other name children give each other: bindings wait for the rest of the pass, so no pass fails on that race (seen
    on a real API server: a traceback and a retry of the cluster's first pass)."""

    def role_first(body: Mapping[str, Any], live: Mapping[str, Any] | None) -> ApiError | None:
        if body["kind"] == "RoleBinding" and env.get(ROLE, body["roleRef"]["name"]) is None:
            return NotFound(f"roles.rbac.authorization.k8s.io {body['roleRef']['name']!r} not found")
        return None

    async with Env() as env:
        env.fake.admission.append(role_first)
        obj = env.create(spec())
        loaded = env.ctx.loader.load(obj)
        assert isinstance(loaded, Loaded)
        objects = render_power_objects(loaded.cluster)
        await env.ctx.reconcilers["cluster"].apply(loaded, list(reversed(objects)))  # the binding before its role
        assert env.get(ROLE_BINDING, power_name(NAME)) is not None
