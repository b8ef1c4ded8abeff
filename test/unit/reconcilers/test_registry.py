"""The component registry: what `slurmctl render` prints is what the reconcilers apply, every component is wired
from its one declaration, and a new component needs nothing but its own entry, renderer and reconciler."""

from __future__ import annotations

import dataclasses
import io
import sys
from typing import Any

import pytest
import yaml

from slurmctl import cli
from slurmctl.api.v1 import COMPONENTS as IMAGES
from slurmctl.api.v1 import OPEN_POLICY, Reason, SlurmCluster, SlurmClusterStatus
from slurmctl.reconcilers import registry
from slurmctl.reconcilers.base import ComponentReconciler
from slurmctl.reconcilers.component import Component, always
from slurmctl.reconcilers.loading import Loaded
from slurmctl.reconcilers.observation import Observation
from slurmctl.reconcilers.plan import Plan
from slurmctl.reconcilers.registry import COMPONENTS, desired_objects
from slurmctl.render import meta
from slurmctl.render.kinds import CONFIGMAP, SECRET
from slurmctl.render.manifests import Inputs
from test.unit.reconcilers.env import NAME, NS, Env, spec
from test.unit.render.samples import VARIANTS, sample_doc

LABEL = meta.LABEL_COMPONENT


def _without_server_fields(obj: dict[str, Any]) -> dict[str, Any]:
    md = {k: v for k, v in obj["metadata"].items() if k != "annotations" or set(v) != {"slurmctl.io/intent-digest"}}
    if "annotations" in md:
        md["annotations"] = {k: v for k, v in md["annotations"].items() if k != "slurmctl.io/intent-digest"}
    return {**obj, "metadata": md}


async def _applied_by_reconcilers(variant: str) -> tuple[list[dict[str, Any]], Inputs]:
    """Run every reconciler on the sample until it converges; return the last body each object was applied with
    (as the reconcilers sent it) and the inputs they read (key Secret uids, the password and its id)."""
    doc = sample_doc(variant)
    name = doc["metadata"]["name"]
    async with Env(policy=OPEN_POLICY) as env:  # the research sample mounts a hostPath and NFS, logs in as root
        env.fake.serve("k8s.mariadb.com/v1alpha1", "MariaDB")
        env.fake.put(doc)
        env.secret(f"{name}-accounting-db", {"password": b"golden-Db-passw0rd"})
        sent: dict[tuple[str, str], dict[str, Any]] = {}
        apply = env.fake.apply

        async def recording_apply(body: Any, **kwargs: Any) -> Any:
            if kwargs.get("subresource") is None:
                sent[(body["kind"], body["metadata"]["name"])] = body
            return await apply(body, **kwargs)

        env.fake.apply = recording_apply  # type: ignore[method-assign]
        for _ in range(2):
            await env.converge(name=name)
            env.job_succeeds(name=name)
        cluster = env.ctx.loader.load(env.cluster(name))
        assert isinstance(cluster, Loaded)
        uid = {s: env.get(SECRET, f"{name}-{s}")["metadata"]["uid"] for s in ("munge", "jwt-key", "ssh-host-keys")}  # type: ignore[index]
        db = "mariadb-passwords" if "mariadb" in variant else "accounting-db"
        password_secret = env.get(SECRET, f"{name}-{db}")
        assert password_secret is not None
        inputs = Inputs(
            cluster=cluster.cluster,
            configs=cluster.configs,
            munge_key_id=uid["munge"],
            jwt_key_id=uid["jwt-key"],
            host_keys_id=uid["ssh-host-keys"],
            dbd_password=env.secret_text(f"{name}-{db}", "password"),
            dbd_password_id=password_secret["metadata"]["resourceVersion"],
            privileged_jobs=OPEN_POLICY.allow_privileged_jobs,
        )
        return [_without_server_fields(o) for o in sent.values()], inputs


@pytest.mark.parametrize("variant", sorted(VARIANTS))
async def test_render_prints_exactly_what_the_reconcilers_apply(variant: str) -> None:
    applied, inputs = await _applied_by_reconcilers(variant)
    rendered = desired_objects(inputs)
    key = lambda o: (o["kind"], o["metadata"]["name"])  # noqa: E731
    assert sorted(map(key, applied)) == sorted(map(key, rendered))
    by_key = {key(o): o for o in rendered}
    for obj in applied:
        assert obj == by_key[key(obj)], f"{key(obj)} differs between slurmctl render and the reconciler"


def test_every_object_carries_its_components_name_and_its_pods_run_its_image() -> None:
    """The registry name is the label on every child; the declared image is what its containers run by default."""
    doc = sample_doc("research")
    for group in doc["spec"]["workers"]:
        group.pop("image", None)
    for part in ("controller", "login", "accounting", "rest", "populateJail"):
        doc["spec"].get(part, {}).pop("image", None)
    doc["spec"]["healthChecks"]["ncclBenchmark"].pop("image", None)
    cluster = SlurmCluster.model_validate(doc)
    inputs = Inputs.offline(cluster, dbd_password="pw")
    for component in COMPONENTS:
        for obj in component.render(inputs):
            assert obj["metadata"]["labels"][LABEL] == component.name, obj["metadata"]["name"]
            images = {c["image"] for c in _containers(obj)}
            if images:
                assert component.image is not None and component.image in IMAGES
                assert images == {cluster.spec.image_for(component.image)}, obj["metadata"]["name"]


def _containers(obj: dict[str, Any]) -> list[dict[str, Any]]:
    spec = obj.get("spec") or {}
    template = (spec.get("jobTemplate", {}).get("spec") or spec).get("template") or {}
    return list((template.get("spec") or {}).get("containers") or [])


def test_component_names_and_conditions_are_unique() -> None:
    for field in ("name", "condition"):
        values = [getattr(c, field) for c in COMPONENTS]
        assert len(values) == len(set(values)), field
    labels = [label for c in COMPONENTS for label in c.labels]
    assert len(labels) == len(set(labels))


async def test_register_builds_one_controller_per_component_the_workers_first() -> None:
    """One per component, and the loop that reads Slurm's view of the nodes (not a component: it owns no child). The
    workers component's first: informers call their listeners in the order they were added, so after a spec edit its
    pass (a size edit's StatefulSet) starts before the others'."""
    async with Env() as env:
        others = [c.name for c in COMPONENTS if c.name != "workers"]
        assert env.manager.controller_names == ["workers", *others, "slurm-nodes"]
        assert list(env.ctx.reconcilers) == [c.name for c in COMPONENTS]  # the components keep their order


async def test_a_cluster_is_parsed_once_per_change_for_all_controllers() -> None:
    async with Env() as env:
        env.create(spec())
        await env.converge()
        before = env.ctx.loader.parsed
        await env.run()  # seven controllers, nothing changed: no parsing at all
        assert env.ctx.loader.parsed == before
        obj = env.cluster()
        env.fake.put({**obj, "metadata": {**obj["metadata"], "labels": {"team": "hpc"}}})  # a new resourceVersion
        await env.run()  # the same spec: only its metadata and status are read again
        assert env.ctx.loader.parsed == before
        env.edit(lambda s: s["workers"][0].update(size=3))  # a new generation
        await env.run()
        assert env.ctx.loader.parsed == before + 1


# ---- a made-up component: only its entry, renderer and plan ----------------------------------------------------


def _notes(inputs: Inputs) -> list[dict[str, Any]]:
    c = meta.cluster_name(inputs.cluster)
    return [meta.configmap(inputs.cluster, f"{c}-notes", "notes", {"workers": str(len(inputs.cluster.spec.workers))})]


def _notes_plan(obs: Observation) -> Plan:
    ok = f"{obs.loaded.name}-notes" in obs.owned(CONFIGMAP)
    cond = obs.condition("NotesReady", ok=ok, reason=Reason.READY if ok else Reason.NOT_READY, message="notes")
    return Plan("NotesReady", apply=tuple(_notes(obs.inputs())), status=SlurmClusterStatus(conditions=[cond]))


def _never_ready(obs: Observation) -> Plan:
    return obs.report("NotesReady", ok=False, reason=Reason.NOT_READY, message="notes")


NOTES = Component(
    name="notes",
    condition="NotesReady",
    reconciler=ComponentReconciler,
    plan=_notes_plan,
    render=_notes,
    owns=(CONFIGMAP,),
    required=always,
    after=("cluster",),
)


async def test_a_new_component_needs_only_its_registry_entry(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(registry, "COMPONENTS", (*COMPONENTS, NOTES))  # what adding the entry to the table does
    async with Env() as env:  # register() with its default: the registry
        assert "notes" in env.manager.controller_names
        env.create(spec())
        env.fake.put(
            {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "stray", "namespace": NS}, "data": {}}
        )
        await env.converge()
        env.job_succeeds()
        await env.converge()
        env.pods_ready()
        await env.converge()
        assert env.get(CONFIGMAP, f"{NAME}-notes") is not None
        assert env.reason("NotesReady") == ("True", "Ready")
        assert env.phase() == "Available"
    # slurmctl render prints its objects too
    out, err = io.StringIO(), io.StringIO()
    monkeypatch.setattr(sys, "stdout", out)
    monkeypatch.setattr(sys, "stderr", err)
    path = "config/samples/slurmcluster_minimal.yaml"
    assert cli.main(["render", "-f", path]) == 0, err.getvalue()
    assert "minimal-notes" in {d["metadata"]["name"] for d in yaml.safe_load_all(out.getvalue()) if d}


async def test_the_phase_counts_a_required_component_that_is_not_ready(monkeypatch: pytest.MonkeyPatch) -> None:
    never_ready = dataclasses.replace(NOTES, plan=_never_ready, render=lambda inputs: [])
    async with Env(components=(*COMPONENTS, never_ready)) as env:
        await env.available()
        assert env.reason("NotesReady") == ("False", "NotReady")
        assert env.phase() == "Reconciling"
