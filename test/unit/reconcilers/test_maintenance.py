"""Maintenance windows: the window arithmetic (api/v1/maintenance.py), the gate that holds rolls outside a window
(reconcilers/maintenance_gate.py), MaintenancePending and the reservation Job (reconcilers/maintenance.py). The clock
is faked by the `now` each observation carries."""

from __future__ import annotations

import copy
import dataclasses
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from slurmctl.api.v1 import MaintenanceWindow, current_window, next_window
from slurmctl.reconcilers import controller, rest, workers
from slurmctl.reconcilers.maintenance import MaintenanceObservation, pending_changes, plan
from slurmctl.reconcilers.maintenance_gate import KEY_IDS_ANNOTATION, gated, rolls_allowed, seconds_to_change
from slurmctl.reconcilers.observation import Observation
from slurmctl.reconcilers.worker_pods import WorkerPods
from slurmctl.render.kinds import DEPLOYMENT, JOB, STATEFULSET
from slurmctl.render.maintenance import RESERVATION, SCRIPT, reservation_job_name
from test.unit.reconcilers.env import NAME, NS, Env, spec
from test.unit.reconcilers.plans import loaded, observe
from test.unit.reconcilers.test_worker_pods import with_pods

# Saturdays 02:00 UTC for 4 hours, and one absolute window on Christmas Eve.
NIGHTLY = {"schedule": "0 2 * * 6", "duration": "4h"}
XMAS = {"start": "2026-12-24T22:00:00Z", "end": "2026-12-25T02:00:00Z"}
SAT = datetime(2026, 12, 5, 2, 0, tzinfo=UTC)  # a Saturday, 02:00
WED = datetime(2026, 12, 2, 12, 0, tzinfo=UTC)


def windows(*raw: dict[str, str]) -> list[MaintenanceWindow]:
    return [MaintenanceWindow.model_validate(w) for w in raw]


def test_a_recurring_window_is_open_from_its_start_until_its_duration_has_passed() -> None:
    ws = windows(NIGHTLY)
    assert current_window(ws, SAT - timedelta(seconds=1)) is None
    span = current_window(ws, SAT)
    assert span is not None and (span.start, span.end, span.index) == (SAT, SAT + timedelta(hours=4), 0)
    assert current_window(ws, SAT + timedelta(hours=3, minutes=59)) == span
    assert current_window(ws, SAT + timedelta(hours=4)) is None, "the end is not in the window"
    upcoming = next_window(ws, WED)
    assert upcoming is not None and upcoming.start == SAT
    assert next_window(ws, SAT) is not None and next_window(ws, SAT).start == SAT + timedelta(days=7)  # type: ignore[union-attr]


def test_an_absolute_window_is_open_once_and_the_earliest_next_start_wins() -> None:
    ws = windows(NIGHTLY, XMAS)
    christmas_eve = datetime(2026, 12, 24, 22, 0, tzinfo=UTC)
    span = current_window(ws, christmas_eve + timedelta(hours=1))
    assert span is not None and (span.index, span.field) == (1, "spec.maintenance.windows[1]")
    upcoming = next_window(ws, datetime(2026, 12, 20, tzinfo=UTC))  # Sunday: the Christmas Eve window opens first
    assert upcoming is not None and upcoming.start == christmas_eve
    assert next_window(windows(XMAS), datetime(2026, 12, 26, tzinfo=UTC)) is None, "an absolute window never recurs"


def test_the_gate_is_open_without_windows_and_inside_one_and_says_when_it_changes() -> None:
    assert rolls_allowed(loaded().cluster.spec, WED)
    cluster = loaded(maintenance={"windows": [NIGHTLY]}).cluster
    assert not rolls_allowed(cluster.spec, WED)
    assert rolls_allowed(cluster.spec, SAT + timedelta(minutes=5))
    assert seconds_to_change(cluster.spec, WED) == (SAT - WED).total_seconds() + 1
    assert seconds_to_change(cluster.spec, SAT) == 4 * 3600 + 1
    assert seconds_to_change(loaded().cluster.spec, WED) is None


def _live(obj: dict[str, Any], **status: Any) -> dict[str, Any]:
    live = {**obj, "metadata": {**obj["metadata"], "uid": "u", "generation": 2}}
    return {**live, "status": {"observedGeneration": 2, **status}}


def _controller_obs(now: datetime, *, spec_extra: dict[str, Any], live: bool) -> Observation:
    cluster = loaded(**spec_extra)
    obs = observe(cluster)
    sts = next(o for o in controller.plan(obs).apply if o["kind"] == "StatefulSet")
    settled = {"replicas": 1, "updateRevision": "r1", "currentRevision": "r1"}
    children = {STATEFULSET: {sts["metadata"]["name"]: _live(sts, **settled)}} if live else {}
    return dataclasses.replace(obs, now=now, children=children)


def test_outside_a_window_a_live_controller_statefulset_is_partitioned_at_its_replicas() -> None:
    held = gated(controller.plan)(_controller_obs(WED, spec_extra={"maintenance": {"windows": [NIGHTLY]}}, live=True))
    sts = next(o for o in held.apply if o["kind"] == "StatefulSet")
    assert sts["spec"]["updateStrategy"] == {"type": "RollingUpdate", "rollingUpdate": {"partition": 1}}
    assert held.requeue_after == (SAT - WED).total_seconds() + 1, "a pass when the window opens"
    # The template is the spec's own: only the roll waits.
    plain = controller.plan(_controller_obs(WED, spec_extra={}, live=True))
    assert sts["spec"]["template"] == next(o for o in plain.apply if o["kind"] == "StatefulSet")["spec"]["template"]


def _unstamped(objs: tuple[dict[str, Any], ...]) -> list[dict[str, Any]]:
    out = []
    for rendered in objs:
        obj = copy.deepcopy(rendered)
        annotations = obj["metadata"].get("annotations", {})
        annotations.pop(KEY_IDS_ANNOTATION, None)
        if not annotations:
            obj["metadata"].pop("annotations", None)
        out.append(obj)
    return out


@pytest.mark.parametrize(
    ("now", "spec_extra", "live"),
    [
        (WED, {}, True),  # no windows: as before windows existed
        (SAT + timedelta(minutes=1), {"maintenance": {"windows": [NIGHTLY]}}, True),  # inside the window
        (WED, {"maintenance": {"windows": [NIGHTLY]}}, False),  # a new StatefulSet is created at once
    ],
)
def test_the_controller_is_rendered_as_without_windows_when_it_may_roll(
    now: datetime, spec_extra: dict[str, Any], live: bool
) -> None:
    obs = _controller_obs(now, spec_extra=spec_extra, live=live)
    gated_apply = gated(controller.plan)(obs).apply
    assert _unstamped(gated_apply) == list(controller.plan(obs).apply)
    stamped = [o for o in gated_apply if KEY_IDS_ANNOTATION in o["metadata"].get("annotations", {})]
    assert len(stamped) == (1 if spec_extra else 0), "with windows the StatefulSet carries the key ids"


def test_a_new_key_and_a_roll_under_way_are_not_held() -> None:
    obs = _controller_obs(WED, spec_extra={"maintenance": {"windows": [NIGHTLY]}}, live=True)
    (name,) = obs.owned(STATEFULSET)
    live = copy.deepcopy(obs.owned(STATEFULSET)[name])

    def strategy(live_sts: dict[str, Any]) -> Any:
        o = dataclasses.replace(obs, children={STATEFULSET: {name: live_sts}})
        sts = next(x for x in gated(controller.plan)(o).apply if x["kind"] == "StatefulSet")
        return sts["spec"].get("updateStrategy")

    held = {"type": "RollingUpdate", "rollingUpdate": {"partition": 1}}
    assert strategy(live) == held, "no stamp yet (windows just added): held"
    live["metadata"]["annotations"] = {KEY_IDS_ANNOTATION: "keys-of-before-a-rotation"}
    assert strategy(live) is None, "its pods must follow a new key: rolled at once"
    rolling = {**live, "metadata": {**live["metadata"], "annotations": {}}}
    rolling["status"] = {"observedGeneration": 2, "updateRevision": "r2", "currentRevision": "r1"}
    assert strategy(rolling) is None, "a roll under way (no partition) runs to its end"
    rolling["spec"] = {**rolling["spec"], "updateStrategy": held}
    assert strategy(rolling) == held, "a held roll stays held"


def test_a_deployment_is_paused_only_once_it_has_pods() -> None:
    cluster = loaded(maintenance={"windows": [NIGHTLY]})
    obs = dataclasses.replace(observe(cluster), now=WED)
    dep = next(o for o in rest.plan(obs).apply if o["kind"] == "Deployment")
    name = dep["metadata"]["name"]
    fresh = dataclasses.replace(obs, children={DEPLOYMENT: {name: _live(dep, replicas=0)}})
    assert "paused" not in next(o for o in gated(rest.plan)(fresh).apply if o["kind"] == "Deployment")["spec"]
    running = dataclasses.replace(obs, children={DEPLOYMENT: {name: _live(dep, replicas=1, updatedReplicas=1)}})
    assert next(o for o in gated(rest.plan)(running).apply if o["kind"] == "Deployment")["spec"]["paused"] is True


async def test_outside_a_window_no_worker_is_rolled_for_a_new_template() -> None:
    async with Env() as env:
        pods = await with_pods(env, spec(maintenance={"windows": [NIGHTLY]}))
        assert len(pods) == 2
        cpu = f"{NAME}-worker-cpu"
        sts = env.get(STATEFULSET, cpu)
        assert sts is not None
        status = {"observedGeneration": sts["metadata"]["generation"], "updateRevision": "rev-2", "readyReplicas": 2}
        env.fake.set_status(*STATEFULSET, cpu, status, namespace=NS)
        found = env.ctx.loader.load(env.cluster())
        view = WorkerPods(env.manager.cache, ("workers", "worker"))
        assert [g.node for g in view.leaving(found, rolls=True)] == [f"{cpu}-1"]  # type: ignore[arg-type]
        assert view.leaving(found, rolls=False) == []  # type: ignore[arg-type]


def test_workers_gated_plan_keeps_their_ondelete_statefulsets_as_rendered() -> None:
    cluster = loaded(maintenance={"windows": [NIGHTLY]})
    obs = dataclasses.replace(observe(cluster), now=WED)
    sts = next(o for o in workers.plan(obs).apply if o["kind"] == "StatefulSet")
    live = dataclasses.replace(obs, children={STATEFULSET: {sts["metadata"]["name"]: _live(sts, replicas=2)}})
    held = next(o for o in gated(workers.plan)(live).apply if o["kind"] == "StatefulSet")
    assert held["spec"]["updateStrategy"] == {"type": "OnDelete"}


# ---- MaintenancePending and the reservation Job ---------------------------------------------------------------------
CONTROLLER_STS = {
    "apiVersion": "apps/v1",
    "kind": "StatefulSet",
    "metadata": {"name": f"{NAME}-controller", "generation": 3, "labels": {}},
    "spec": {
        "replicas": 1,
        "selector": {"matchLabels": {"app": "ctl"}},
        "template": {"spec": {"containers": [{"name": "slurmctld", "image": "ctl:2"}]}},
    },
    "status": {"observedGeneration": 3, "replicas": 1, "updatedReplicas": 0, "updateRevision": "r2"},
}
CONTROLLER_POD = {
    "metadata": {"name": f"{NAME}-controller-0", "labels": {"app": "ctl"}},
    "spec": {"containers": [{"name": "slurmctld", "image": "ctl:1"}]},
}


def _maintenance_obs(now: datetime, *, spec_extra: dict[str, Any], pending: bool = True, **facts: Any) -> Any:
    base = dataclasses.replace(observe(loaded(**spec_extra)), now=now)
    workloads = {f"StatefulSet/{NAME}-controller": CONTROLLER_STS} if pending else {}
    pods = {CONTROLLER_POD["metadata"]["name"]: CONTROLLER_POD}  # type: ignore[index]
    return dataclasses.replace(MaintenanceObservation.of(base, workloads=workloads, rolling_pods=pods), **facts)


def _condition(p: Any) -> Any:
    (cond,) = p.status.conditions
    return cond


def test_a_change_outside_a_window_is_pending_naming_it_and_the_next_window_and_the_reservation_is_made() -> None:
    p = plan(_maintenance_obs(WED, spec_extra={"maintenance": {"windows": [NIGHTLY]}}))
    cond = _condition(p)
    assert (cond.type, cond.status, cond.reason) == ("MaintenancePending", "True", "WaitingForWindow")
    assert "from 2026-12-05T02:00:00Z to 2026-12-05T06:00:00Z (spec.maintenance.windows[0])" in cond.message
    assert f"StatefulSet {NAME}-controller (slurmctld image ctl:1 -> ctl:2; 1 of 1 pods)" in cond.message
    assert [e.reason for e in p.events] == ["WaitingForWindow"]
    (job,) = [c.obj for c in p.create]
    assert job is not None and job["kind"] == "Job"
    env = {e["name"]: e["value"] for e in job["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert (env["WINDOW_START"], env["WINDOW_END"], env["RESERVATION"]) == (
        "2026-12-05T02:00:00Z",
        "2026-12-05T06:00:00Z",
        RESERVATION,
    )
    assert "flags=MAINT,IGNORE_JOBS" in SCRIPT and "nodes=ALL" in SCRIPT
    assert p.requeue_after == (SAT - WED).total_seconds() + 1
    keyless = plan(_maintenance_obs(WED, spec_extra={"maintenance": {"windows": [NIGHTLY]}}, keys={}))
    assert keyless.create == (), "no Job before the munge key it mounts exists"


def test_inside_the_window_the_change_is_applied_and_a_done_job_reads_as_the_reservation() -> None:
    now = SAT + timedelta(minutes=10)
    span_job = reservation_job_name(NAME, current_window(windows(NIGHTLY), now))
    done = {"metadata": {"name": span_job, "uid": "j"}, "status": {"succeeded": 1}}
    obs = _maintenance_obs(now, spec_extra={"maintenance": {"windows": [NIGHTLY]}}, children={JOB: {span_job: done}})
    p = plan(obs)
    cond = _condition(p)
    assert (cond.status, cond.reason) == ("True", "InWindow")
    assert "open until 2026-12-05T06:00:00Z" in cond.message
    assert f"{RESERVATION} (MAINT, IGNORE_JOBS, all nodes) covers 2026-12-05T02:00:00Z to 2026-12-05T06:00:00Z" in (
        cond.message
    )
    assert p.create == () and p.delete == ()
    settled = plan(dataclasses.replace(obs, workloads={}))
    assert (_condition(settled).status, _condition(settled).reason) == ("False", "NothingPending")


def test_the_next_window_replaces_the_job_of_the_last_one() -> None:
    old = {"metadata": {"name": f"{NAME}-maintenance-old", "uid": "o"}, "status": {"succeeded": 1}}
    obs = _maintenance_obs(
        SAT + timedelta(hours=5), spec_extra={"maintenance": {"windows": [NIGHTLY]}}, children={JOB: {"x": old}}
    )
    p = plan(obs)
    assert [d.name for d in p.delete] == ["x"]
    (job,) = [c.obj for c in p.create]
    env = {e["name"]: e["value"] for e in job["spec"]["template"]["spec"]["containers"][0]["env"]}  # type: ignore[index]
    assert env["WINDOW_START"] == "2026-12-12T02:00:00Z"


def test_without_windows_nothing_is_said_and_a_reservation_made_before_is_removed() -> None:
    assert plan(_maintenance_obs(WED, spec_extra={}, pending=False)) == plan(
        _maintenance_obs(WED, spec_extra={}, pending=False)
    )
    quiet = plan(_maintenance_obs(WED, spec_extra={}, pending=False))
    assert (quiet.status, quiet.create, quiet.delete) == (None, (), ())
    made = {"metadata": {"name": "made", "uid": "m"}, "status": {"succeeded": 1}}
    removing = plan(_maintenance_obs(WED, spec_extra={}, children={JOB: {"made": made}}))
    (job,) = [c.obj for c in removing.create]
    env = {e["name"]: e["value"] for e in job["spec"]["template"]["spec"]["containers"][0]["env"]}  # type: ignore[index]
    assert env["WINDOW_START"] == "" and [d.name for d in removing.delete] == ["made"]
    removal = reservation_job_name(NAME, None)
    done = {"metadata": {"name": removal, "uid": "r"}, "status": {"succeeded": 1}}
    finished = plan(_maintenance_obs(WED, spec_extra={}, children={JOB: {removal: done}}))
    assert [d.name for d in finished.delete] == [removal] and finished.create == ()


def test_a_workload_its_controller_has_not_seen_yet_or_fully_updated_is_not_pending() -> None:
    unseen = {**CONTROLLER_STS, "status": {**CONTROLLER_STS["status"], "observedGeneration": 2}}  # type: ignore[dict-item]
    done = {**CONTROLLER_STS, "status": {**CONTROLLER_STS["status"], "updatedReplicas": 1}}  # type: ignore[dict-item]
    assert pending_changes({"StatefulSet/a": unseen, "StatefulSet/b": done}, [CONTROLLER_POD]) == []
    assert pending_changes({"StatefulSet/a": CONTROLLER_STS}, []) == ["StatefulSet a (a new pod template; 1 of 1 pods)"]


def test_a_failed_reservation_job_is_named_with_a_warning() -> None:
    name = reservation_job_name(NAME, next_window(windows(NIGHTLY), WED))
    failed = {"metadata": {"name": name, "uid": "f"}, "status": {"conditions": [{"type": "Failed", "status": "True"}]}}
    p = plan(_maintenance_obs(WED, spec_extra={"maintenance": {"windows": [NIGHTLY]}}, children={JOB: {name: failed}}))
    assert f"the Job {name} could not make Slurm reservation {RESERVATION}" in _condition(p).message
    assert "ReservationFailed" in [e.reason for e in p.events] and p.create == ()
