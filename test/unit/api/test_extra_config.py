"""extraConfig cannot take over the keys slurmctl's pods depend on, unless the spec says so explicitly."""

from __future__ import annotations

import re
from typing import Any

import pytest

from slurmctl.api.v1 import OPEN_POLICY, SlurmCluster, check_cluster
from slurmctl.api.v1.defaults import ACCOUNTING_SLURM_KEYS, GPU_HEALTH_CHECK_SLURM_KEYS, OPERATOR_OWNED_SLURM_KEYS
from slurmctl.api.v1.policy import INCLUDE_REFUSED
from slurmctl.render.slurm_conf import render_slurm_conf
from test.unit.api.helpers import REPO, openapi_schema
from test.unit.render.samples import sample

HATCH = "set spec.slurm.allowOperatorOwnedKeys: true to override it at your own risk"


def cluster(extra: str, **slurm: Any) -> dict[str, Any]:
    return {
        "apiVersion": "slurm.slurmctl.io/v1",
        "kind": "SlurmCluster",
        "metadata": {"name": "demo"},
        "spec": {
            "jail": {"volume": {"claimName": "jail"}},
            "workers": [{"name": "gpu", "gpus": 8}],
            "accounting": {"enabled": True, "mariadb": {"enabled": True}},
            "slurm": {"extraConfig": extra, **slurm},
        },
    }


def problems_of(obj: dict[str, Any]) -> list[str]:
    return [str(p) for p in check_cluster(obj, policy=OPEN_POLICY)[1]]


@pytest.mark.parametrize(
    ("line", "key"),
    [
        ("SlurmctldHost=evil(10.0.0.1)", "SlurmctldHost"),
        ("AuthType=auth/none", "AuthType"),
        ("authalttypes=auth/jwt", "AuthAltTypes"),
        ("PlugStackConfig=/dev/null", "PlugStackConfig"),
        ("SlurmdUser=nobody", "SlurmdUser"),
        ("Include /etc/slurm/other.conf", "Include"),
        ("StateSaveLocation = /tmp", "StateSaveLocation"),
        ("NodeName=extra-[0-9] CPUs=4", "NodeName"),
        ("PartitionName=debug Nodes=ALL", "PartitionName"),
        ("AccountingStorageHost=elsewhere", "AccountingStorageHost"),
        ("HealthCheckProgram=/bin/true", "HealthCheckProgram"),
        ("MaxJobCount=5 \\\n  ClusterName=other", "ClusterName"),
        # Slurm's own reading of a line (parse_config.c): continued lines join without a space, escapes vanish,
        # blanks after the backslash do not count ...
        ("Plug\\\nStackConfig=/dev/null", "PlugStackConfig"),
        ("Plug\\Stack\\Config=/dev/null", "PlugStackConfig"),
        ("MaxJobCount=5 \\  \t\n  AuthType=auth/none", "AuthType"),
        # ... a `#` after an even number of backslashes starts a comment, after an odd one it is text ...
        ("SchedulerParameters=a\\#b PlugStackConfig=/dev/null", "PlugStackConfig"),
        # ... and a key may be added to, not only set.
        ("PlugStackConfig+=/dev/null", "PlugStackConfig"),
    ],
)
def test_operator_owned_keys_are_refused_with_the_line(line: str, key: str) -> None:
    extra = f"# tuned for us\nMaxJobCount=10000\n{line}\n"
    assert problems_of(cluster(extra)) == [
        f"spec.slurm.extraConfig: line 3: {key} is owned by slurmctl (it carries the contract between slurmctl and "
        f"its pods, or switches a guarantee off); remove it, or {HATCH}",
        *([f"spec.slurm.extraConfig: line 3: Include {INCLUDE_REFUSED}"] if key == "Include" else []),
    ]


def test_comments_and_ordinary_tuning_are_fine() -> None:
    extra = (
        "# AuthType=auth/none is not set here\nSchedulerParameters=bf_continue # SlurmUser=x\nPrologFlags=Contain,X11\n"
    )
    assert problems_of(cluster(extra)) == []


@pytest.mark.parametrize("comment", ["# note \\", "# note \\\\", "MaxJobCount=5 # \\"])
def test_a_comment_never_continues_onto_the_next_line(comment: str) -> None:
    """Slurm strips the comment before it looks for a continuation: the line after a comment ending in backslashes
    is a line of its own."""
    assert problems_of(cluster(f"{comment}\nPlugStackConfig=/dev/null\n")) == [
        f"spec.slurm.extraConfig: line 2: PlugStackConfig is owned by slurmctl (it carries the contract between "
        f"slurmctl and its pods, or switches a guarantee off); remove it, or {HATCH}"
    ]


@pytest.mark.parametrize(
    "extra",
    [
        "SchedulerParameters=a\\#b\n",  # `\#`: an odd run, text
        "# AuthType=auth/none \\\n",
        "SchedulerParameters=x\\\\\nPrologFlags=Contain\n",  # an even run at the end: no continuation
    ],
)
def test_what_slurm_reads_as_a_comment_or_a_value_is_fine(extra: str) -> None:
    assert problems_of(cluster(extra)) == []


def test_the_escape_hatch_lets_them_through() -> None:
    assert problems_of(cluster("AuthType=auth/none\nPlugStackConfig=/x\n", allowOperatorOwnedKeys=True)) == []
    assert problems_of(cluster("Include /x\n", allowOperatorOwnedKeys=True)) == [
        f"spec.slurm.extraConfig: line 1: Include {INCLUDE_REFUSED}"
    ], "the operator's policy refuses Include whatever the spec says"


def test_feature_keys_are_owned_only_while_the_feature_is_on() -> None:
    obj = cluster("AccountingStorageHost=external-dbd\nHealthCheckProgram=/usr/local/bin/check\n")
    obj["spec"]["accounting"] = {"enabled": False}
    obj["spec"]["healthChecks"] = {"gpu": {"enabled": False}}
    assert problems_of(obj) == []


def test_the_list_follows_what_the_renderer_writes() -> None:
    """Every owned key the renderer writes is spelled as it writes it, and every key that carries the contract with
    the pods (names, ports, users, paths, plugins) is owned."""
    conf = render_slurm_conf(sample("research"))
    written = set(re.findall(r"^([A-Za-z]+)=", conf, re.MULTILINE)) | {"Include"}
    contract = {
        "ClusterName", "SlurmctldHost", "SlurmctldPort", "SlurmdPort", "AuthType", "CredType", "SlurmUser",
        "SlurmdUser", "StateSaveLocation", "SlurmdSpoolDir", "SlurmctldPidFile", "SlurmdPidFile", "PlugStackConfig",
        "ProctrackType", "Include", "AccountingStorageType", "AccountingStorageHost", "AccountingStoragePort",
        "HealthCheckProgram",
    }  # fmt: skip
    owned = {*OPERATOR_OWNED_SLURM_KEYS, *ACCOUNTING_SLURM_KEYS, *GPU_HEALTH_CHECK_SLURM_KEYS}
    # PlugStackConfig is left at Slurm's default (plugstack.conf beside slurm.conf, where the renderer puts the jail's
    # plugin line): owned all the same, since moving it switches the jail off.
    written.add("PlugStackConfig")
    assert contract <= written, "the renderer no longer writes some of these: update the list"
    assert contract <= owned


def test_kubectl_explain_lists_the_owned_keys_and_the_hatch() -> None:
    slurm = openapi_schema()["properties"]["spec"]["properties"]["slurm"]["properties"]
    assert all(key in slurm["extraConfig"]["description"] for key in OPERATOR_OWNED_SLURM_KEYS)
    assert "allowOperatorOwnedKeys" in slurm["extraConfig"]["description"]
    assert "unsupported" in slurm["allowOperatorOwnedKeys"]["description"]
    assert SlurmCluster.model_validate(cluster("")).spec.slurm.allow_operator_owned_keys is False


def test_the_docs_list_the_same_keys() -> None:
    """docs/usage.md "Raw slurm.conf lines" names every key extraConfig refuses, so users learn it before a refusal."""
    usage = (REPO / "docs" / "usage.md").read_text()
    for key in (*OPERATOR_OWNED_SLURM_KEYS, *ACCOUNTING_SLURM_KEYS, *GPU_HEALTH_CHECK_SLURM_KEYS):
        assert f"`{key}`" in usage, key
