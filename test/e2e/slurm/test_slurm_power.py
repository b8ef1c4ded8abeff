"""The operator's POWER_DOWN_ASAP (slurm/client.py `power_down_asap`) against a real slurmrestd and slurmctld 24.11
with power saving on: the node is drained at once, a job on it runs to its end, and only then does Slurm power the
node down (and clear the drain, so that it can be powered up again). Its own instance: power saving needs a
SuspendProgram and a SuspendTime, which the client tests' instance has not (an hour here: nothing is powered down
by itself while the test runs)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from datetime import timedelta

import pytest

from slurmctl.slurm import SlurmClient, TokenSource, new_session
from test.e2e.slurm.local_slurm import LocalSlurm, local_slurm_instance
from test.e2e.slurm.test_slurm_client import read_until, the_node

pytestmark = pytest.mark.slurm

POWER_SAVING = "\n".join(
    ["SuspendProgram=/bin/true", "ResumeProgram=/bin/true", "SuspendTime=3600", "SuspendTimeout=5", "ResumeTimeout=60"]
)


@pytest.fixture(scope="module")
def power_slurm(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalSlurm]:
    with local_slurm_instance(
        tmp_path_factory.mktemp("power-slurm"), plugin="none", rest=True, extra_conf=POWER_SAVING
    ) as slurm:
        yield slurm


@pytest.fixture
async def client(power_slurm: LocalSlurm) -> AsyncIterator[SlurmClient]:
    assert power_slurm.rest_url is not None and power_slurm.jwt_key is not None
    token = TokenSource(power_slurm.jwt_key.read_bytes(), user="root", lifetime=timedelta(minutes=10))
    async with new_session() as session:
        yield SlurmClient(session=session, base_url=power_slurm.rest_url, token=token, user="root", timeout=10)


async def test_power_down_asap_drains_lets_the_job_finish_then_powers_the_node_down(
    power_slurm: LocalSlurm, client: SlurmClient
) -> None:
    name = power_slurm.node
    await read_until(lambda: the_node(client, name), lambda n: n.base == "IDLE" and not n.drain, what="idle node")
    # Longer than Slurm's power saving takes to act on a POWER_DOWN (it looks every few seconds): a power-down that
    # did not wait for the job would end it before it completes.
    sbatch = power_slurm.run("sbatch", "--parsable", "--output=/dev/null", "--job-name=e2e-asap", "--wrap=sleep 20")
    job_id = int(sbatch.stdout.strip().split(";")[0])
    try:
        await read_until(
            client.jobs, lambda js: any(j.job_id == job_id and j.state == "RUNNING" for j in js), what="job running"
        )
        await client.power_down_asap([name])
        node = await read_until(lambda: the_node(client, name), lambda n: n.drain, what="drained by POWER_DOWN_ASAP")
        assert node.busy and "POWER_DOWN" in node.state and not node.powered_down, node.state
        jobs = await read_until(
            client.jobs,
            lambda js: any(j.job_id == job_id and j.state != "RUNNING" for j in js),
            what=f"job {job_id} to end",
            timeout=60,
        )
    finally:
        power_slurm.run("scancel", str(job_id))
    assert [(j.state, j.exit_code.return_code) for j in jobs if j.job_id == job_id] == [("COMPLETED", 0)]
    node = await read_until(
        lambda: the_node(client, name), lambda n: "POWERED_DOWN" in n.state, what="powered down once idle", timeout=60
    )
    assert not node.drain, f"the drain is Slurm's to clear as it powers down: {node.state}"
