"""The operator's Slurm client against a real slurmrestd 24.11 and slurmctld (hack/local-slurm.sh with
LOCAL_SLURM_REST=1): what it reads matches what Slurm's own commands say, and what it changes, Slurm does."""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TypeVar

import pytest

from slurmctl.slurm import (
    Node,
    SlurmAuthError,
    SlurmClient,
    SlurmUnavailable,
    SlurmUnknownNodeError,
    TokenSource,
    mint_token,
    new_session,
)
from test.e2e.harness import eventually
from test.e2e.slurm.local_slurm import LocalSlurm, local_slurm_instance

pytestmark = pytest.mark.slurm

# A node slurmctld knows without a slurmd behind it: `scontrol create` needs MaxNodeCount above the static nodes.
DYNAMIC_NODE = "dyn1"
T = TypeVar("T")


@pytest.fixture(scope="module")
def rest_slurm(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalSlurm]:
    with local_slurm_instance(
        tmp_path_factory.mktemp("rest-slurm"), plugin="none", rest=True, extra_conf="MaxNodeCount=4"
    ) as slurm:
        yield slurm


@pytest.fixture
async def client(rest_slurm: LocalSlurm) -> AsyncIterator[SlurmClient]:
    assert rest_slurm.rest_url is not None and rest_slurm.jwt_key is not None
    # SlurmUser is root in the local instance: root may drain, resume, delete and reconfigure.
    token = TokenSource(rest_slurm.jwt_key.read_bytes(), user="root", lifetime=timedelta(minutes=10))
    async with new_session() as session:
        yield SlurmClient(session=session, base_url=rest_slurm.rest_url, token=token, user="root", timeout=10)


async def read_until(read: Callable[[], Awaitable[T]], ok: Callable[[T], bool], *, what: str, timeout: float = 30) -> T:
    """Read until `ok(value)` (harness.eventually over a read and a predicate)."""

    async def probe() -> T | None:
        value = await read()
        return value if ok(value) else None

    return await eventually(probe, timeout=timeout, interval=0.2, what=what)


async def the_node(client: SlurmClient, name: str) -> Node:
    return next(n for n in await client.nodes() if n.name == name)


def sinfo_state(slurm: LocalSlurm) -> str:
    return slurm.run("sinfo", "--noheader", "--nodes", slurm.node, "--format", "%T").stdout.strip()


async def test_ping_and_the_node_as_slurm_sees_it(rest_slurm: LocalSlurm, client: SlurmClient) -> None:
    await client.ping()
    # The one SlurmctldHost, by the name `scontrol ping` gives it, answering.
    (host,) = (await client.controllers()).items()
    assert host[1] and f"at {host[0]} is UP" in rest_slurm.run("scontrol", "ping").stdout, host
    node = await read_until(lambda: the_node(client, rest_slurm.node), lambda n: n.base == "IDLE", what="idle node")
    assert (node.display, node.drain, node.busy) == ("Idle", False, False)
    assert node.partitions == ("debug",)
    show = rest_slurm.run("scontrol", "show", "node", rest_slurm.node).stdout
    assert f"CPUTot={node.cpus} " in show
    (part,) = [p for p in await client.partitions() if p.name == "debug"]
    assert part.nodes == (rest_slurm.node,) and part.total_nodes == 1 and part.total_cpus == node.cpus


async def test_drain_with_a_reason_then_resume(rest_slurm: LocalSlurm, client: SlurmClient) -> None:
    name = rest_slurm.node
    before = await the_node(client, name)
    assert not before.drain and sinfo_state(rest_slurm) == "idle"

    await client.drain([name], reason="slurmctl: e2e drain")
    node = await read_until(lambda: the_node(client, name), lambda n: n.drain, what="DRAIN")
    assert (node.display, node.drained, node.reason) == ("Drained", True, "slurmctl: e2e drain")
    assert node.reason_set_by == "root"
    assert sinfo_state(rest_slurm) == "drained"
    assert "Reason=slurmctl: e2e drain" in rest_slurm.run("scontrol", "show", "node", name).stdout

    await client.resume([name])
    node = await read_until(lambda: the_node(client, name), lambda n: n.state == {"IDLE"}, what="the node back to idle")
    assert node.display == "Idle" and sinfo_state(rest_slurm) == "idle"
    # Slurm 24.11 keeps the old reason on the resumed node (26.05 clears it); the client shows none, as `sinfo -R`
    # does.
    kept = "Reason=slurmctl: e2e drain" in rest_slurm.run("scontrol", "show", "node", name).stdout
    assert kept == (rest_slurm.slurm_line == "24.11"), f"Slurm {rest_slurm.slurm_line} kept the reason: {kept}"
    assert (node.reason, node.reason_set_by) == ("", "")
    assert name not in rest_slurm.run("sinfo", "-R", "--noheader", "--format", "%N").stdout.split()


async def test_a_job_is_seen_on_its_node_and_a_drain_waits_for_it(rest_slurm: LocalSlurm, client: SlurmClient) -> None:
    name = rest_slurm.node
    job_id = int(
        rest_slurm.run("sbatch", "--parsable", "--output=/dev/null", "--job-name=e2e-client", "--wrap=sleep 300")
        .stdout.strip()
        .split(";")[0]
    )
    try:
        jobs = await read_until(
            client.jobs,
            lambda js: any(j.job_id == job_id and j.state == "RUNNING" for j in js),
            what=f"job {job_id} running",
        )
        (job,) = [j for j in jobs if j.job_id == job_id]
        assert (job.name, job.user, job.nodes) == ("e2e-client", "root", (name,))
        squeue = rest_slurm.run("squeue", "--noheader", "--jobs", str(job_id), "--format", "%T %N").stdout.split()
        assert squeue == ["RUNNING", name]

        await client.drain([name], reason="slurmctl: e2e scale-in")
        node = await read_until(lambda: the_node(client, name), lambda n: n.drain, what="DRAIN on the busy node")
        assert (node.display, node.busy, node.drained) == ("Draining", True, False)
        assert sinfo_state(rest_slurm) == "draining"
    finally:
        rest_slurm.run("scancel", str(job_id))
    node = await read_until(lambda: the_node(client, name), lambda n: n.drained, what="drained once the job ended")
    assert node.display == "Drained"
    finished = await read_until(
        client.jobs,
        lambda js: any(j.job_id == job_id and j.state != "RUNNING" for j in js),
        what=f"job {job_id} to end",
    )
    assert next(j for j in finished if j.job_id == job_id).state == "CANCELLED"
    await client.resume([name])
    await read_until(lambda: the_node(client, name), lambda n: n.state == {"IDLE"}, what="idle again")


async def test_reconfigure_is_taken_and_slurm_answers_again(rest_slurm: LocalSlurm, client: SlurmClient) -> None:
    log_before = rest_slurm.log("slurmctld").count("Reconfigure")
    await client.reconfigure()
    await read_until(
        lambda: asyncio.to_thread(rest_slurm.log, "slurmctld"),
        lambda log: log.count("Reconfigure") > log_before,
        what="slurmctld to log the reconfigure",
    )
    await read_until(
        lambda: the_node(client, rest_slurm.node), lambda n: n.base == "IDLE", what="the node idle after reconfigure"
    )
    await client.ping()


async def test_delete_a_dynamic_node(rest_slurm: LocalSlurm, client: SlurmClient) -> None:
    rest_slurm.run("scontrol", "create", f"NodeName={DYNAMIC_NODE}", "CPUs=1", "State=FUTURE")
    assert DYNAMIC_NODE in {n.name for n in await client.nodes()}
    await client.delete_node(DYNAMIC_NODE)
    assert DYNAMIC_NODE not in {n.name for n in await client.nodes()}
    shown = rest_slurm.run("scontrol", "show", "node", DYNAMIC_NODE, check=False)
    assert shown.returncode != 0 and "not found" in (shown.stdout + shown.stderr)


async def test_an_update_naming_a_node_slurm_does_not_know_is_refused_whole(
    rest_slurm: LocalSlurm, client: SlurmClient
) -> None:
    """What the node loop writes one node at a time when it meets it (node_executor._write): slurmctld changes none of
    the named nodes, whatever the order, and the error says which kind of refusal it is (ESLURM_INVALID_NODE_NAME)."""
    for names in ([rest_slurm.node, "gone-1"], ["gone-1", rest_slurm.node]):
        with pytest.raises(SlurmUnknownNodeError, match="Invalid node name"):
            await client.drain(names, reason="slurmctl: e2e")
        assert sinfo_state(rest_slurm) == "idle"
    with pytest.raises(SlurmUnknownNodeError):
        await client.delete_node("gone-1")


async def test_a_token_signed_with_another_key_is_an_auth_error(rest_slurm: LocalSlurm) -> None:
    assert rest_slurm.rest_url is not None
    wrong = mint_token(
        b"not the key that slurmctld has!!", user="root", lifetime=timedelta(minutes=5), now=datetime.now(UTC)
    )
    async with new_session() as session:
        c = SlurmClient(session=session, base_url=rest_slurm.rest_url, token=lambda: wrong, user="root")
        with pytest.raises(SlurmAuthError) as info:
            await c.nodes()
    assert "authentication" in str(info.value)


async def test_slurmctld_gone_is_unavailable_and_slurmrestd_stops_with_the_instance(tmp_path: Path) -> None:
    with local_slurm_instance(tmp_path / "s", plugin="none", rest=True) as slurm:
        assert slurm.rest_url is not None and slurm.jwt_key is not None
        rest_pid = slurm.pid("slurmrestd")
        assert "slurmrestd" in Path(f"/proc/{rest_pid}/cmdline").read_text()
        token = TokenSource(slurm.jwt_key.read_bytes(), user="root")
        async with new_session() as session:
            # slurmrestd gives up on slurmctld after about 9 s: a deadline above that shows its own answer.
            c = SlurmClient(session=session, base_url=slurm.rest_url, token=token, user="root", timeout=30)
            await c.ping()
            ctld = slurm.pid("slurmctld")
            os.kill(ctld, signal.SIGTERM)
            slurm.wait_until(lambda: not Path(f"/proc/{ctld}").exists(), what="slurmctld to exit")
            with pytest.raises(SlurmUnavailable, match="slurmctld does not answer"):
                await c.ping()
            assert set((await c.controllers()).values()) == {False}, "each SlurmctldHost listed, none answering"
            with pytest.raises(SlurmUnavailable, match="Unable to contact slurm controller"):
                await c.nodes()
    # `down` stopped the slurmrestd it started (by its recorded PID).
    assert not Path(f"/proc/{rest_pid}").exists() or "slurmrestd" not in Path(f"/proc/{rest_pid}/cmdline").read_text()
