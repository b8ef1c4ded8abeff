"""A Slurm upgrade's plan (reconcilers/upgrade.py), pure: which line each component renders from the lines its pods
run, stage by stage in Slurm's order; the refusals; the images it renders; the backup; status and Events."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path

import pytest

from slurmctl.api.v1 import IMAGE_TAG_SUFFIX, SLURM_VERSION, SlurmClusterSpec, upgrade_refusal
from slurmctl.reconcilers import accounting, cluster, upgrade
from slurmctl.reconcilers.upgrade import Decision, PodLine, decide
from test.unit.reconcilers.plans import loaded, observe

OLD, NEW = "24.11", "26.05"
DESIRED = {"accounting": 1, "controller": 1, "workers": 2, "login": 1, "rest": 1}


def pods(lines: Mapping[str, Sequence[str]], *, not_ready: Sequence[str] = ()) -> dict[str, Counter[PodLine]]:
    """Each component's pods by line ('24.11' or '26.05'); `not_ready`: components whose new-line pods are not ready."""
    return {
        c: Counter(PodLine(line, c not in not_ready or line != NEW) for line in found) for c, found in lines.items()
    }


ALL_OLD = {"accounting": [OLD], "controller": [OLD], "workers": [OLD, OLD], "login": [OLD], "rest": [OLD]}


def test_a_new_cluster_and_a_current_one_render_the_spec_line() -> None:
    assert decide(NEW, {}, DESIRED) == Decision(NEW)
    current = decide(OLD, pods(ALL_OLD), DESIRED)
    assert current.phase == "Current" and not current.upgrading
    assert all(current.target(c) == OLD for c in upgrade.STAGED)


def test_the_database_is_backed_up_before_anything_moves() -> None:
    backups: tuple[upgrade.Backup, ...] = ("missing", "running", "failed")
    for backup in backups:
        d = decide(NEW, pods(ALL_OLD), DESIRED, backup=backup)
        assert d.phase == "BackingUp" and d.from_ == OLD
        assert {c: d.target(c) for c in upgrade.STAGED} == dict.fromkeys(upgrade.STAGED, OLD)
    assert "the backup Job failed" in decide(NEW, pods(ALL_OLD), DESIRED, backup="failed").message


def test_slurmdbd_moves_first_then_each_stage_once_the_one_before_is_ready() -> None:
    d = decide(NEW, pods(ALL_OLD), DESIRED, backup="succeeded")
    assert d.phase == "Accounting"
    assert d.target("accounting") == NEW and d.target("controller") == OLD and d.target("workers") == OLD
    # slurmdbd's new pod is there but not ready yet: slurmctld waits.
    moving = {**ALL_OLD, "accounting": [NEW]}
    d = decide(NEW, pods(moving, not_ready=["accounting"]), DESIRED, backup="succeeded")
    assert d.phase == "Accounting" and d.target("controller") == OLD
    d = decide(NEW, pods(moving), DESIRED, backup="succeeded")
    assert d.phase == "Controller" and d.target("controller") == NEW and d.target("workers") == OLD
    moving = {**moving, "controller": [NEW]}
    d = decide(NEW, pods(moving), DESIRED, backup="succeeded")
    assert d.phase == "Workers" and d.target("workers") == NEW
    assert d.target("login") == OLD and d.target("rest") == OLD
    # One worker moved, the other (its job running) not yet: login and slurmrestd wait.
    moving = {**moving, "workers": [NEW, OLD]}
    d = decide(NEW, pods(moving), DESIRED, backup="succeeded")
    assert d.phase == "Workers" and d.target("login") == OLD
    # A missing worker pod (being re-created) is not "done" either.
    moving = {**moving, "workers": [NEW]}
    assert decide(NEW, pods(moving), DESIRED, backup="succeeded").phase == "Workers"
    moving = {**moving, "workers": [NEW, NEW]}
    d = decide(NEW, pods(moving), DESIRED, backup="succeeded")
    assert d.phase == "LoginAndRest" and d.target("login") == NEW and d.target("rest") == NEW
    done = decide(NEW, pods({c: [NEW] * len(v) for c, v in ALL_OLD.items()}), DESIRED)
    assert done.phase == "Current" and done.message == "every component runs Slurm 26.05"


def test_a_stage_that_started_never_goes_back() -> None:
    """slurmctld moved, then slurmdbd's pod is not ready (restarting): slurmctld stays on the new line, the workers
    wait, the backup Job may be gone."""
    moving = {**ALL_OLD, "accounting": [NEW], "controller": [NEW]}
    d = decide(NEW, pods(moving, not_ready=["accounting"]), DESIRED, backup="missing")
    assert d.target("accounting") == NEW and d.target("controller") == NEW and d.target("workers") == OLD
    assert d.phase == "Accounting"


def test_without_accounting_no_backup_and_the_controller_goes_first() -> None:
    no_dbd = {c: v for c, v in ALL_OLD.items() if c != "accounting"}
    d = decide(NEW, pods(no_dbd), {**DESIRED, "accounting": 0})
    assert d.phase == "Controller" and d.target("controller") == NEW


def test_a_downgrade_is_refused_and_nothing_moves() -> None:
    current = {c: [NEW] * len(v) for c, v in ALL_OLD.items()}
    d = decide(OLD, pods(current), DESIRED)
    assert d.phase == "Refused" and "a downgrade from Slurm 26.05 to 24.11" in (d.refusal or "")
    assert all(d.target(c) == NEW for c in upgrade.STAGED)
    # Half-way back: every component stays where it is.
    half = {**ALL_OLD, "accounting": [NEW]}
    d = decide(OLD, pods(half), DESIRED)
    assert d.phase == "Refused" and d.target("accounting") == NEW and d.target("controller") == OLD


def test_which_moves_slurm_supports() -> None:
    assert upgrade_refusal("24.11", "26.05") is None  # 25.05, 25.11, 26.05: three releases, 24.11's window
    assert upgrade_refusal("24.05", "26.05") is not None  # four releases
    assert "upgrades only from the 3 major releases" in (upgrade_refusal("24.05", "26.05") or "")
    assert upgrade_refusal("23.02", "24.11") is None
    assert upgrade_refusal("23.02", "24.05") is None
    assert upgrade_refusal("22.05", "24.05") is not None  # unknown release
    assert "a downgrade" in (upgrade_refusal("26.05", "25.11") or "")


def test_the_line_picks_the_default_image_and_images_say_their_line() -> None:
    spec = SlurmClusterSpec.model_validate({"jail": {"volume": {"claimName": "j"}}, "workers": [{"name": "cpu"}]})
    assert spec.image_for("controller").endswith(":0.1.0")
    moved = spec.model_copy(update={"slurm": spec.slurm.model_copy(update={"version": NEW})})
    assert moved.image_for("controller").endswith(":0.1.0-slurm26.05")
    assert upgrade.image_lines(spec, "worker") == {
        spec.image_for("worker"): OLD,
        moved.image_for("worker"): NEW,
    }
    pinned = spec.model_copy(update={"slurm": spec.slurm.model_copy(update={"image_tag": "mine"})})
    assert upgrade.image_lines(pinned, "worker") == {}  # one tag for every line: the images say nothing


def test_the_tag_suffixes_are_the_pin_files() -> None:
    pins = Path(__file__).resolve().parents[3] / "images" / "lines"
    for line, suffix in IMAGE_TAG_SUFFIX.items():
        path = pins / f"{line}.pins"
        if suffix:
            assert f"tag-suffix {suffix}\n" in path.read_text()
        else:
            assert not path.exists()


@pytest.mark.parametrize("phase", ["BackingUp", "Workers"])
def test_the_accounting_plan_backs_up_with_the_old_lines_image(phase: str) -> None:
    cl = loaded(
        accounting={"enabled": True, "external": {"host": "db", "user": "slurm", "passwordSecretRef": {"name": "pw"}}}
    )
    decision = Decision(NEW, {"accounting": OLD}, {"accounting": OLD}, phase, OLD)  # type: ignore[arg-type]
    secret = {"data": {"password": "c2VjcmV0"}, "metadata": {"resourceVersion": "1"}}
    obs = accounting.AccountingObservation.of(
        observe(upgrade.pinned(cl, OLD), upgrade=decision), password_secret=secret
    )
    objects = accounting.plan(obs).apply
    job = next(o for o in objects if o["kind"] == "Job")
    claim = next(o for o in objects if o["kind"] == "PersistentVolumeClaim")
    assert job["metadata"]["name"] == f"{cl.name}-slurmdbd-backup-2411-2605"
    container = job["spec"]["template"]["spec"]["containers"][0]
    assert container["image"].endswith("/accounting:0.1.0")
    assert "mariadb-dump" in container["command"][-1]
    assert "ownerReferences" not in claim["metadata"]
    # Not upgrading: no backup.
    current = accounting.AccountingObservation.of(observe(cl, upgrade=Decision(OLD)), password_secret=secret)
    assert not [o for o in accounting.plan(current).apply if o["kind"] in ("Job", "PersistentVolumeClaim")]


def test_the_cluster_status_says_where_the_upgrade_is_with_an_event_per_stage() -> None:
    cl = loaded()
    decision = decide(NEW, pods({**ALL_OLD, "accounting": [NEW]}), DESIRED, backup="succeeded")
    said = {**cl.obj["status"], "slurm": {"phase": "Accounting", "components": {}}}
    p = cluster.plan(observe(cl, upgrade=decision, said=said))
    assert p.status is not None and p.status.slurm is not None
    assert p.status.slurm.phase == "Controller" and p.status.slurm.upgrade_from == OLD
    assert p.status.slurm.version is None and p.status.slurm.components["accounting"] == NEW
    cond = p.status.condition(SLURM_VERSION)
    assert cond is not None and cond.status == "False" and cond.reason == "Upgrading"
    assert [(e.reason, e.message.split(":")[0]) for e in p.events] == [("SlurmUpgradeController", "Controller")]
    done = decide(NEW, pods({c: [NEW] * len(v) for c, v in ALL_OLD.items()}), DESIRED)
    ended = cluster.plan(observe(cl, upgrade=done, said={**said, "slurm": {"phase": "LoginAndRest"}}))
    assert [e.reason for e in ended.events] == ["SlurmUpgradeDone"]
    # The same phase again: no second Event.
    said = {**said, "slurm": {"phase": "Controller"}}
    assert cluster.plan(observe(cl, upgrade=decision, said=said)).events == ()
    refused = decide(OLD, pods({c: [NEW] * len(v) for c, v in ALL_OLD.items()}), DESIRED)
    p = cluster.plan(observe(cl, upgrade=refused, said=said))
    assert p.status is not None and p.status.slurm is not None and p.status.slurm.phase == "Refused"
    cond = p.status.condition(SLURM_VERSION)
    assert cond is not None and cond.reason == "UpgradeRefused" and "a downgrade" in cond.message
    assert [(e.type, e.reason) for e in p.events] == [("Warning", "SlurmUpgradeRefused")]
