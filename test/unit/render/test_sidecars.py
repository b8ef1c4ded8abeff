"""munged is a native sidecar in every Slurm daemon's pod: an init container with `restartPolicy: Always` whose
startup probe waits for its socket, so the kubelet starts it before the daemon and stops it after the daemon has
exited (render/pods.py munge_container). No preStop handshake is left to keep it up meanwhile."""

from __future__ import annotations

import pytest

from slurmctl.api.v1 import SlurmCluster
from slurmctl.reconcilers.registry import desired_objects
from slurmctl.render.manifests import Inputs
from slurmctl.render.pods import MUNGE_SOCKET
from test.unit.render.samples import VARIANTS, sample_doc

DAEMONS = {"slurmctld", "slurmd", "sshd", "slurmdbd"}


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_every_daemon_pod_runs_munged_as_a_sidecar_that_starts_first_and_stops_last(variant: str) -> None:
    cluster = SlurmCluster.model_validate(sample_doc(variant))
    seen = set()
    for obj in desired_objects(Inputs.offline(cluster)):
        pod = ((obj.get("spec") or {}).get("template") or {}).get("spec") or {}
        daemons = [c["name"] for c in pod.get("containers", []) if c["name"] in DAEMONS]
        if not daemons:
            continue
        seen.update(daemons)
        assert "munge" not in [c["name"] for c in pod["containers"]], obj["metadata"]["name"]
        (munge,) = pod["initContainers"]
        assert (munge["name"], munge["restartPolicy"]) == ("munge", "Always")
        assert munge["startupProbe"]["exec"]["command"] == ["test", "-S", MUNGE_SOCKET]
        assert "lifecycle" not in munge, "no preStop: the kubelet stops a sidecar after the daemon"
    assert seen >= {"slurmctld", "slurmd", "sshd"}
