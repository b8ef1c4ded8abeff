"""slurm.conf's MaxNodeCount on a real slurmctld 24.11 (hack/local-slurm.sh): every cluster renders the API's most
(MAX_TOTAL_WORKERS), and a cluster made by an operator that rendered 4096 takes the new value with the reconfigure its
containers run when the ConfigMap changes (MaxNodeCount is no restart key): no node forgotten, no job ended, and
room for the nodes past 4096 at once."""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest

from slurmctl.api.v1 import MAX_TOTAL_WORKERS
from test.e2e.slurm.local_slurm import LocalSlurm, local_slurm_instance

pytestmark = pytest.mark.slurm

OLD_MAX = 4096  # what slurm.conf said before the API's limit was raised
# Nodes slurmctld knows with no slurmd behind them (as a worker scaled in but not deleted yet, or not started yet).
FIRST = "old[1-4000]"
TOO_MANY = "new[1-200]"
MORE = "more[1-6000]"


@pytest.fixture
def slurm(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalSlurm]:
    with local_slurm_instance(
        tmp_path_factory.mktemp("node-table"), plugin="none", extra_conf=f"MaxNodeCount={OLD_MAX}"
    ) as instance:
        yield instance


def max_node_count(slurm: LocalSlurm) -> int:
    shown = slurm.run("scontrol", "show", "config").stdout
    found = re.search(r"^MaxNodeCount\s*=\s*(\d+)", shown, re.MULTILINE)
    assert found, shown
    return int(found.group(1))


def nodes(slurm: LocalSlurm) -> int:
    """Every node slurmctld holds, FUTURE ones included."""
    return len(slurm.run("scontrol", "--future", "show", "nodes", "--oneliner").stdout.splitlines())


def job_state(slurm: LocalSlurm, job_id: str) -> str:
    return slurm.run("squeue", "--noheader", "--jobs", job_id, "--format", "%T", check=False).stdout.strip()


def test_a_cluster_at_the_old_node_table_takes_the_larger_one_with_a_reconfigure(slurm: LocalSlurm) -> None:
    job_id = slurm.run("sbatch", "--parsable", "--output=/dev/null", "--wrap=sleep 300").stdout.strip().split(";")[0]
    slurm.wait_until(lambda: job_state(slurm, job_id) == "RUNNING", what=f"job {job_id} running")
    slurm.run("scontrol", "create", f"NodeName={FIRST}", "CPUs=1", "State=FUTURE")
    assert (max_node_count(slurm), nodes(slurm)) == (OLD_MAX, 4001)
    # The old table ends at 4096: slurmctld refuses the nodes past it (24.11 fills the table first, 26.05 adds none),
    # so a larger cluster's nodes could not register.
    refused = slurm.run("scontrol", "create", f"NodeName={TOO_MANY}", "CPUs=1", "State=FUTURE", check=False)
    held = nodes(slurm)
    assert refused.returncode != 0 and "table is full" in refused.stderr + refused.stdout, refused
    assert 4001 <= held <= OLD_MAX

    conf = slurm.state_dir / "etc" / "slurm.conf"
    conf.write_text(conf.read_text().replace(f"MaxNodeCount={OLD_MAX}", f"MaxNodeCount={MAX_TOTAL_WORKERS}"))
    slurm.run("scontrol", "reconfigure")

    slurm.wait_until(lambda: max_node_count(slurm) == MAX_TOTAL_WORKERS, what="the larger node table")
    assert nodes(slurm) == held, "a node slurmctld held was forgotten"
    slurm.run("scontrol", "create", f"NodeName={MORE}", "CPUs=1", "State=FUTURE")
    assert nodes(slurm) == held + 6000
    assert job_state(slurm, job_id) == "RUNNING", slurm.log_tail("slurmctld")
    slurm.run("scancel", job_id)
