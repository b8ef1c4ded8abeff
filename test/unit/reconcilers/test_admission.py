"""Pods the API server refuses at admission (here a stand-in for Pod Security's `baseline` level): the component whose
pods are refused says so in its condition and one Warning Event, naming the pod, the level and the violation; the
others carry on; nothing is asked again while nothing changes; and all of it clears once the pods are admitted."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from slurmctl.reconcilers.admission import MEMO_SECONDS, Admission
from slurmctl.render.kinds import DEPLOYMENT, JOB, STATEFULSET
from slurmctl.runtime.errors import ApiError, error_for_status, rejection
from slurmctl.runtime.fake import FakeClient
from test.unit.reconcilers.env import NAME, NS, Env, spec
from test.unit.runtime.fakes import FakeClock

BASELINE_CAPABILITIES = {
    "AUDIT_WRITE",
    "CHOWN",
    "DAC_OVERRIDE",
    "FOWNER",
    "FSETID",
    "KILL",
    "MKNOD",
    "NET_BIND_SERVICE",
}
BASELINE_CAPABILITIES |= {"SETFCAP", "SETGID", "SETPCAP", "SETUID", "SYS_CHROOT"}


def baseline(body: Mapping[str, Any], live: Mapping[str, Any] | None) -> ApiError | None:
    """Pod Security's baseline checks on privileged mode and added capabilities, worded as the API server words them."""
    if body["kind"] != "Pod":
        return None
    pod = body["spec"]
    violations = []
    for c in [*pod.get("initContainers", []), *pod.get("containers", [])]:
        context = c.get("securityContext") or {}
        if context.get("privileged"):
            violations.append(f'privileged (container "{c["name"]}" must not set securityContext.privileged=true)')
        extra = sorted(set((context.get("capabilities") or {}).get("add", [])) - BASELINE_CAPABILITIES)
        if extra:
            added = ", ".join(f'"{cap}"' for cap in extra)
            violations.append(f'non-default capabilities (container "{c["name"]}" must not include {added})')
    if not violations:
        return None
    message = f'pods "{body["metadata"]["name"]}" is forbidden: violates PodSecurity "baseline:latest": '
    return error_for_status(403, {"reason": "Forbidden", "message": message + ", ".join(violations)})


def controllers_try(env: Env) -> None:
    """The StatefulSet and Deployment controllers: each creates the pods it lacks, which admission lets through or
    refuses (a refused StatefulSet stays at 0 pods; a refused Deployment says ReplicaFailure), and a kubelet makes the
    admitted ones ready."""
    for sts in env.fake.of_kind(*STATEFULSET):
        md, replicas = sts["metadata"], sts["spec"].get("replicas", 1)
        template = sts["spec"]["template"]
        pod = {"kind": "Pod", "metadata": {"name": f"{md['name']}-0"}, "spec": template["spec"]}
        made = 0 if any(check(pod, None) for check in env.fake.admission) else replicas
        status = {"observedGeneration": md["generation"], "replicas": made, "readyReplicas": made}
        env.fake.set_status(*STATEFULSET, md["name"], status, namespace=NS)
    for dep in env.fake.of_kind(*DEPLOYMENT):
        md = dep["metadata"]
        pod = {"kind": "Pod", "metadata": {"name": f"{md['name']}-5d8f-x"}, "spec": dep["spec"]["template"]["spec"]}
        refused = next((e for check in env.fake.admission if (e := check(pod, None)) is not None), None)
        failure = {"type": "ReplicaFailure", "status": "True", "reason": "FailedCreate", "message": str(refused)}
        status = {"conditions": [failure]} if refused else {"availableReplicas": 1}
        env.fake.set_status(*DEPLOYMENT, md["name"], status, namespace=NS)


async def test_refused_pods_are_named_in_their_components_condition_once_and_clear_when_admitted() -> None:
    async with Env() as env:
        env.fake.admission.append(baseline)
        env.create(spec())
        await env.converge()
        env.job_succeeds()
        await env.converge()
        controllers_try(env)
        await env.converge()

        workers = env.condition("WorkersReady") or {}
        assert (workers["status"], workers["reason"]) == ("False", "PodRefused")
        assert f"StatefulSet {NAME}-worker-cpu" in workers["message"]
        assert f'pods "{NAME}-worker-cpu-0" is forbidden: violates PodSecurity "baseline:latest"' in workers["message"]
        assert 'privileged (container "slurmd" must not set securityContext.privileged=true)' in workers["message"]
        login = env.condition("LoginReady") or {}
        assert login["reason"] == "PodRefused" and '"SYS_ADMIN"' in login["message"], login
        assert env.reason("ControllerReady") == ("True", "Ready"), "slurmctld's pod meets baseline"
        assert env.reason("RestReady") == ("True", "Ready")
        assert env.phase() == "Degraded"

        asked = env.ctx.admission.asked
        for _ in range(3):  # resyncs and other events change nothing: no new Event, nothing asked again
            await env.run()
        # One Warning per refused workload: the recorder folds Events of one reason on one object into one (count 2).
        refusals = [e for e in env.fake.of_kind("v1", "Event") if e["reason"] == "PodRefused"]
        assert [(e["type"], e["count"]) for e in refusals] == [("Warning", 2)], refusals
        assert refusals[0]["message"].startswith("the API server refuses the pods of StatefulSet ")
        assert env.ctx.admission.asked == asked
        assert env.fake.dry_runs, "the API server was asked with dry-run creates"
        assert all(w.kind != "Pod" for w in env.fake.writes), "nothing but dry runs: no pod was made by the operator"

        env.fake.admission.remove(baseline)  # the namespace relabelled: the controllers' retries go through
        controllers_try(env)
        await env.converge()
        assert env.reason("WorkersReady") == ("True", "Ready")
        assert env.reason("LoginReady") == ("True", "Ready")
        assert env.phase() == "Available"


async def test_a_refused_deployment_and_job_are_read_and_asked() -> None:
    """slurmrestd's Deployment says ReplicaFailure; the populate-jail Job is asked once its controller started it."""

    def no_rest(body: Mapping[str, Any], live: Mapping[str, Any] | None) -> ApiError | None:
        name = body["metadata"].get("name") or body["metadata"].get("generateName", "")
        if body["kind"] == "Pod" and (name.startswith(f"{NAME}-rest") or name.startswith(f"{NAME}-populate-jail")):
            message = (
                f'pods "{name}" is forbidden: exceeded quota: pods, requested: pods=1, used: pods=10, limited: pods=10'
            )
            return error_for_status(403, {"reason": "Forbidden", "message": message})
        return None

    async with Env() as env:
        env.fake.admission.append(no_rest)
        env.create(spec())
        await env.converge()
        assert env.reason("JailPopulated") == ("False", "Populating"), "not started by its controller yet: not asked"
        env.fake.set_status(*JOB, f"{NAME}-populate-jail", {"startTime": "2026-12-01T00:00:00Z"}, namespace=NS)
        await env.converge()
        jail = env.condition("JailPopulated") or {}
        assert jail["reason"] == "PodRefused" and f"Job {NAME}-populate-jail" in jail["message"], jail
        assert "exceeded quota" in jail["message"]
        controllers_try(env)
        await env.converge()
        rest = env.condition("RestReady") or {}
        assert rest["reason"] == "PodRefused" and f"Deployment {NAME}-rest" in rest["message"], rest


async def test_only_workloads_short_of_pods_are_asked_and_answers_are_kept_for_a_while() -> None:
    clock = FakeClock()
    fake = FakeClient()
    fake.admission.append(baseline)
    admission = Admission(fake, clock)
    sts: dict[str, Any] = {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": {"name": "w", "namespace": NS, "uid": "u1", "generation": 1},
        "spec": {
            "replicas": 2,
            "template": {"spec": {"containers": [{"name": "slurmd", "securityContext": {"privileged": True}}]}},
            "volumeClaimTemplates": [{"metadata": {"name": "state"}}],
        },
        "status": {"observedGeneration": 1, "replicas": 1},
    }
    said = await admission.refusal(sts)
    assert said is not None and 'pods "w-1" is forbidden' in said, "the next ordinal is the one asked for"
    assert await admission.refusal(sts) == said and admission.asked == 1
    await clock.advance(MEMO_SECONDS + 1)
    assert await admission.refusal(sts) == said and admission.asked == 2
    assert await admission.refusal({**sts, "status": {"observedGeneration": 1, "replicas": 2}}) is None
    assert await admission.refusal({**sts, "status": {"observedGeneration": 0, "replicas": 0}}) is None
    assert admission.asked == 2, "complete, or not yet seen by its controller: nothing to ask"
    fake.admission.clear()
    assert await admission.refusal({**sts, "metadata": {**sts["metadata"], "generation": 2}, "status": {}}) is None


def test_a_pod_security_or_quota_refusal_is_a_rejection_and_rbac_is_not() -> None:
    psa = 'pods "c-worker-gpu-3" is forbidden: violates PodSecurity "baseline:latest": privileged (container ...)'
    assert rejection(error_for_status(403, {"reason": "Forbidden", "message": psa})) == psa
    quota = 'pods "p" is forbidden: exceeded quota: compute, requested: cpu=2, used: cpu=8, limited: cpu=8'
    assert rejection(error_for_status(403, {"reason": "Forbidden", "message": quota})) == quota
    rbac = 'pods is forbidden: User "system:serviceaccount:x:y" cannot create resource "pods" in the namespace "n"'
    assert rejection(error_for_status(403, {"reason": "Forbidden", "message": rbac})) is None
