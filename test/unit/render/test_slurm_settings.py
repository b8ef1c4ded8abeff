"""Slurm's own defaults unless there is a reason: every key the renderers write is in docs/slurm-settings.md with its
reason, PropagateResourceLimits is left to Slurm, and spec.slurm.logLevel reaches each daemon's own setting."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from slurmctl.api.v1 import Policy, SlurmCluster, check_cluster
from slurmctl.render import accounting
from slurmctl.render.slurm_conf import CGROUP_CONF, RESTART_KEYS, SLURM_CONF, render_slurm_configs
from test.unit.render.samples import DBD_PASSWORD, sample_doc

SETTINGS_DOC = Path(__file__).resolve().parents[3] / "docs" / "slurm-settings.md"
# A table row's first cell: one or more `Key` names.
_ROW = re.compile(r"^\| ((?:`[A-Za-z]+`(?:, )?)+) \|")


def _documented(section: str) -> set[str]:
    """The keys of the table under `## <section>` in docs/slurm-settings.md."""
    text = SETTINGS_DOC.read_text()
    body = text.split(f"\n## {section}\n", 1)[1].split("\n## ", 1)[0]
    keys: set[str] = set()
    for line in body.splitlines():
        if match := _ROW.match(line):
            keys |= set(re.findall(r"`([A-Za-z]+)`", match.group(1)))
    return keys


def _keys(text: str) -> set[str]:
    """Keys a rendered file sets (not the Include of nodes.conf, nor the header)."""
    return {line.split("=", 1)[0] for line in text.splitlines() if "=" in line and not line.startswith("#")}


def _cluster(variant: str, **slurm: Any) -> SlurmCluster:
    doc = sample_doc(variant)
    doc["spec"].setdefault("slurm", {}).update(slurm)
    return SlurmCluster.model_validate(doc)


def _every_feature() -> SlurmCluster:
    """The research sample (accounting, GPUs, the health check) with an elastic group, a topology, cgroup v2 and
    every log level set: every key any renderer writes."""
    doc = sample_doc("research")
    doc["spec"]["workers"][1]["autoscale"] = {"min": 1, "max": 4}
    doc["spec"]["topology"] = {"tree": {"levels": ["topology.kubernetes.io/zone"]}}
    doc["spec"]["slurm"].update(
        cgroupVersion="v2",
        logLevel={"slurmctld": "debug", "slurmd": "debug2", "slurmdbd": "verbose"},
        extraConfig=None,
    )
    doc["spec"]["slurm"].pop("config", None)
    return SlurmCluster.model_validate(doc)


def test_every_key_written_is_documented_with_its_reason() -> None:
    cluster = _every_feature()
    configs = render_slurm_configs(cluster, root_jobs=False)
    dbd = accounting.render_slurmdbd_conf(cluster, dbd_password=DBD_PASSWORD)
    for section, text in (("slurm.conf", configs[SLURM_CONF]), ("cgroup.conf", configs[CGROUP_CONF])):
        written = _keys(text)
        assert written <= _documented(section), f"{section}: undocumented {sorted(written - _documented(section))}"
    assert _keys(dbd) <= _documented("slurmdbd.conf"), sorted(_keys(dbd) - _documented("slurmdbd.conf"))


def test_resource_limits_are_slurms_default_and_left_to_the_spec() -> None:
    """Slurm propagates every limit of the login session (ALL) when slurm.conf names neither key; either may be set in
    extraConfig (Slurm accepts only one of the two, so slurmctl writes neither)."""
    for variant in ("minimal", "research"):
        slurm = render_slurm_configs(_cluster(variant))[SLURM_CONF]
        assert "PropagateResourceLimits" not in slurm, variant
    for line in ("PropagateResourceLimitsExcept=MEMLOCK", "PropagateResourceLimits=NONE"):
        doc = sample_doc("minimal")
        doc["spec"]["slurm"] = {"extraConfig": line}
        cluster, problems = check_cluster(doc, policy=Policy())
        assert cluster is not None and problems == [], (line, problems)
        assert render_slurm_configs(cluster)[SLURM_CONF].splitlines()[-1] == line


def test_info_is_slurms_default_and_writes_nothing() -> None:
    cluster = _cluster("research", logLevel={"slurmctld": "info", "slurmd": "info", "slurmdbd": "info"})
    slurm = render_slurm_configs(cluster)[SLURM_CONF]
    assert "Debug=" not in slurm
    assert "DebugLevel" not in accounting.render_slurmdbd_conf(cluster, dbd_password=DBD_PASSWORD)


def test_log_levels_reach_each_daemons_own_setting() -> None:
    cluster = _every_feature()
    slurm = render_slurm_configs(cluster)[SLURM_CONF].splitlines()
    assert {"SlurmctldDebug=debug", "SlurmdDebug=debug2"} <= set(slurm)
    assert "DebugLevel=verbose" in accounting.render_slurmdbd_conf(cluster, dbd_password=DBD_PASSWORD).splitlines()
    # A reconfigure applies them: changing a level restarts neither slurmctld nor a worker.
    assert {"slurmctlddebug", "slurmddebug"}.isdisjoint(RESTART_KEYS)


@pytest.mark.parametrize(
    ("slurm", "expected"),
    [
        ({"config": {"slurmctldDebug": "debug3"}}, "SlurmctldDebug=debug3"),
        ({"config": {"slurmctldDebug": "debug3"}, "logLevel": {"slurmctld": "error"}}, "SlurmctldDebug=error"),
    ],
)
def test_the_older_typed_keys_still_work_and_log_level_wins(slurm: dict[str, Any], expected: str) -> None:
    assert expected in render_slurm_configs(_cluster("minimal", **slurm))[SLURM_CONF].splitlines()


def test_an_unknown_level_is_refused() -> None:
    doc = sample_doc("minimal")
    doc["spec"]["slurm"] = {"logLevel": {"slurmd": "loud"}}
    cluster, problems = check_cluster(doc, policy=Policy())
    assert cluster is None
    assert any("logLevel" in problem.path for problem in problems), problems
