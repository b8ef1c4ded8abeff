"""Objects the API server refuses: the component's condition names the object and the server's message, one Event
per rejection (not per retry), the phase shows it, no retry loop, and a later successful apply clears it."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

import pytest

from slurmctl.api.v1 import Policy
from slurmctl.reconcilers.base import MAX_REJECTION_MESSAGE, ApplyRejected
from slurmctl.render.kinds import CONFIGMAP, STATEFULSET
from slurmctl.runtime import Invalid, ServerError
from slurmctl.runtime.errors import ApiError, error_for_status, rejection
from test.unit.reconcilers.env import NAME, POLICY, Env, spec

IMMUTABLE = (
    'StatefulSet.apps "c-controller" is invalid: spec: Forbidden: updates to statefulset spec for fields other than '
    "'replicas', 'template', 'updateStrategy' and 'minReadySeconds' are forbidden"
)


def immutable_claims(body: Mapping[str, Any], live: Mapping[str, Any] | None) -> ApiError | None:
    """The StatefulSet controller's rule: volumeClaimTemplates cannot change once the StatefulSet exists."""
    if body["kind"] != "StatefulSet" or live is None:
        return None
    if body["spec"].get("volumeClaimTemplates") != live["spec"].get("volumeClaimTemplates"):
        return error_for_status(422, {"reason": "Invalid", "message": IMMUTABLE}, context="PATCH statefulsets")
    return None


async def test_an_immutable_state_volume_change_ends_in_a_clear_condition_one_event_and_recovers() -> None:
    async with Env() as env:
        env.fake.admission.append(immutable_claims)
        await env.available()
        assert env.phase() == "Available"
        env.edit(lambda s: s.setdefault("controller", {}).update(stateVolume={"size": "50Gi"}))
        for _ in range(3):  # retries (resyncs, child events) record nothing new
            results = await env.run()
        assert results["controller"] is None, "no retry loop: the controller waits for a change"
        status, reason = env.reason("ControllerReady") or ("", "")
        assert (status, reason) == ("False", "ApplyRejected")
        message = (env.condition("ControllerReady") or {})["message"]
        assert f"StatefulSet {NAME}-controller" in message and "Forbidden: updates to statefulset spec" in message
        assert "spec.controller.stateVolume" in message, "the hint names the field to revert"
        rejected = [e for e in env.events() if e[1] == "ApplyRejected"]
        assert len(rejected) == 1 and rejected[0][0] == "Warning"
        assert env.phase() == "Degraded"
        assert env.reason("WorkersReady") == ("True", "Ready"), "the other components carry on"

        env.edit(lambda s: s["controller"].pop("stateVolume"))
        await env.converge()
        env.pods_ready()
        await env.converge()
        assert env.reason("ControllerReady") == ("True", "Ready")
        assert env.phase() == "Available"


async def test_a_body_the_server_cannot_convert_is_reported_on_the_shared_configs_and_fails_the_cluster() -> None:
    def reject_configs(body: Mapping[str, Any], live: Mapping[str, Any] | None) -> ApiError | None:
        if body["kind"] == "ConfigMap" and body["metadata"]["name"] == f"{NAME}-slurm-configs":
            message = (
                "failed to create typed patch object: .data.slurm.conf: expected string, got &value.valueUnstructured"
            )
            return ServerError(f"PATCH configmaps: 500 {message}", status=500, detail=message)
        return None

    async with Env() as env:
        env.fake.admission.append(reject_configs)
        env.create(spec())
        await env.run()
        await env.run()
        assert env.reason("SpecValid") == ("False", "ApplyRejected")
        assert f"ConfigMap {NAME}-slurm-configs" in (env.condition("SpecValid") or {})["message"]
        assert env.phase() == "Failed"
        assert env.get(CONFIGMAP, f"{NAME}-slurm-configs") is None and env.fake.of_kind(*STATEFULSET) == []
        assert len([e for e in env.events() if e[1] == "ApplyRejected"]) == 1


async def test_an_unavailable_server_is_not_a_rejection() -> None:
    def unavailable(body: Mapping[str, Any], live: Mapping[str, Any] | None) -> ApiError | None:
        return ServerError("PATCH configmaps: 503 ServiceUnavailable", status=503)

    async with Env() as env:
        env.fake.admission.append(unavailable)
        env.create(spec())
        try:
            await env.run("cluster")
        except ServerError:
            pass
        else:
            raise AssertionError("a 503 must reach the controller, which retries with backoff")
        assert env.condition("SpecValid") is None


def test_rejection_tells_refused_content_from_outages() -> None:
    assert rejection(Invalid("x: 422", status=422, detail="bad")) == "bad"
    assert rejection(error_for_status(400, {"message": "bad request"})) == "bad request"
    assert rejection(error_for_status(500, {"message": "failed to create typed patch object: x"})) is not None
    assert rejection(error_for_status(500, {"message": "etcdserver: request timed out"})) is None
    assert rejection(error_for_status(503, {"message": "is invalid"})) is None
    assert rejection(error_for_status(403, {"message": "forbidden"})) is None


async def test_host_path_volumes_are_an_invalid_spec_unless_the_operator_allows_them() -> None:
    host = {"name": "scratch", "mountPath": "/scratch", "volume": {"source": {"hostPath": {"path": "/mnt/nvme"}}}}
    async with Env() as env:
        env.create(spec(jail={"volume": {"claimName": "jail"}, "subMounts": [host]}))
        await env.converge()
        assert env.reason("SpecValid") == ("False", "InvalidSpec")
        message = (env.condition("SpecValid") or {})["message"]
        assert "spec.jail.subMounts[0].volume.source.hostPath" in message and "--allow-host-path" in message
        assert [w for w in env.fake.writes if w.kind != "Event" and w.subresource != "status"] == []
    async with Env(policy=replace(POLICY, allow_host_path=True)) as env:
        env.create(spec(jail={"volume": {"claimName": "jail"}, "subMounts": [host]}))
        await env.converge()
        assert env.reason("SpecValid") == ("True", "Valid")


async def test_a_rejected_object_does_not_hold_back_the_others_of_the_same_pass() -> None:
    """One pass applies its objects together: group `a`'s StatefulSet refused, group `b`'s (rendered after it) is
    still created, and the condition names the refused one."""

    def reject_group_a(body: Mapping[str, Any], live: Mapping[str, Any] | None) -> ApiError | None:
        if body["kind"] == "StatefulSet" and body["metadata"]["name"] == f"{NAME}-worker-a":
            return Invalid("PATCH statefulsets: 422", status=422, detail="spec.replicas: Invalid value: quota")
        return None

    group = {"size": 1, "resources": {"requests": {"cpu": 1, "memory": "1Gi"}}}
    async with Env() as env:
        env.fake.admission.append(reject_group_a)
        env.create(spec(workers=[{"name": "a", **group}, {"name": "b", **group}]))
        await env.converge()
        env.job_succeeds()  # the jail is populated: the worker groups may start
        await env.converge()
        names = {o["metadata"]["name"] for o in env.fake.of_kind(*STATEFULSET)}
        assert f"{NAME}-worker-b" in names and f"{NAME}-worker-a" not in names
        assert env.reason("WorkersReady") == ("False", "ApplyRejected")
        assert f"StatefulSet {NAME}-worker-a" in (env.condition("WorkersReady") or {})["message"]


def test_the_hint_survives_a_current_api_servers_long_immutable_field_message() -> None:
    """From 1.34 the API server names the immutable field and quotes all of it: the message is cut to fit a condition,
    the hint on what to do is kept whole."""
    quoted = '[{"metadata":{"name":"state"},"spec":{"resources":{"requests":{"storage":"50Gi"}}}}]' * 40
    invalid = 'StatefulSet.apps "c-controller" is invalid'
    detail = f"{invalid}: spec.volumeClaimTemplates: Invalid value: {quoted}: field is immutable"
    message = ApplyRejected("StatefulSet", "c-controller", detail).message
    assert len(message) <= MAX_REJECTION_MESSAGE
    assert message.startswith('the API server rejected StatefulSet c-controller: StatefulSet.apps "c-controller"')
    assert message.endswith("its claims are kept)") and "spec.controller.stateVolume" in message
    assert (
        "spec.controller.stateVolume" not in ApplyRejected("StatefulSet", "c-controller", "spec.replicas: bad").message
    )


async def test_a_spec_the_operators_policy_refuses_is_a_condition_an_event_and_a_log_line_naming_the_field(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A root login and a control-plane toleration under the default policy (only what the test bench's `spec`
    needs opted in, minus root logins): nothing is created, once; with the opt-ins the same spec runs, and slurm.conf
    refuses root's jobs unless --allow-root-jobs."""
    spec_ = spec(controller={"tolerations": [{"key": "node-role.kubernetes.io/control-plane", "operator": "Exists"}]})
    fields = ("spec.login.sshRootPublicKeys", "spec.controller.tolerations[0]")
    caplog.set_level(logging.WARNING)
    async with Env(policy=Policy()) as env:
        env.create(spec_)
        for _ in range(3):
            await env.converge()
        assert env.reason("SpecValid") == ("False", "InvalidSpec")
        message = (env.condition("SpecValid") or {})["message"]
        assert all(field in message for field in fields), message
        assert "--allow-root-logins" in message and "--allow-control-plane-nodes" in message
        refused = [e for e in env.events() if e[1] == "InvalidSpec"]
        assert len(refused) == 1 and refused[0][0] == "Warning" and all(f in refused[0][2] for f in fields)
        lines = [r.getMessage() for r in caplog.records if all(f in r.getMessage() for f in fields)]
        assert len(lines) == 1, lines
        assert [w for w in env.fake.writes if w.kind != "Event" and w.subresource != "status"] == []
    for root_jobs, expected in ((False, ["DisableRootJobs=YES"]), (True, [])):
        opted_in = Policy(allow_root_logins=True, allow_control_plane_nodes=True, allow_root_jobs=root_jobs)
        async with Env(policy=opted_in) as env:
            env.create(spec_)
            await env.converge()
            assert env.reason("SpecValid") == ("True", "Valid")
            (configs,) = [c for c in env.fake.of_kind(*CONFIGMAP) if c["metadata"]["name"] == f"{NAME}-slurm-configs"]
            conf = configs["data"]["slurm.conf"].splitlines()
            assert [line for line in conf if line.startswith("DisableRootJobs")] == expected
