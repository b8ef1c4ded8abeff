"""A cluster whose slurmrestd answers more than the operator's cap (slurm/answer.py): the real client against a
stand-in that streams 1 GiB. The cluster's condition, one Event and one log line name the cap; the other cluster, on
the same operator, keeps being reconciled."""

from __future__ import annotations

import copy
import logging

import aiohttp
import pytest
from prometheus_client import generate_latest

from slurmctl.reconcilers.registry import register
from slurmctl.reconcilers.slurm_access import SlurmAccess, SlurmApi
from slurmctl.render.kinds import POD
from slurmctl.runtime import Manager, ManagerOptions, Result
from slurmctl.slurm import SlurmClient
from test.unit.reconcilers.env import NAME, NS, Env, spec
from test.unit.reconcilers.fake_slurm import EveryLookIsLater, FakeSlurm, connect, rest_pod
from test.unit.reconcilers.test_accounting import LIMITS, PASSWORD
from test.unit.slurm.replay import GIB, recording, serve, streaming

BIG = "big"  # the cluster whose slurmrestd answers too much
BIG_IP = "127.0.0.10"  # its slurmrestd pod's address (the other cluster's is fake_slurm's)
CAP = 1024 * 1024
QOS = "/slurmdb/v0.0.42/qos/"
NODES = recording("nodes_idle")["request"]["path"]
CAPPED = "answer larger than the operator's cap of 1 MiB; reading stopped at the cap"


def route(env: Env, fake: FakeSlurm, big: SlurmClient) -> None:
    """Both clusters get a ready slurmrestd pod and a JWT key; BIG's requests go to `big`, the other's to `fake`."""
    for name in (NAME, BIG):
        connect(env, fake, name=name)
    pod = copy.deepcopy(env.get(POD, rest_pod(BIG)))
    assert pod is not None
    pod["status"]["podIP"] = BIG_IP
    env.fake.put(pod)

    def to(url: str, token: object) -> SlurmApi:
        return big if url.startswith(f"http://{BIG_IP}:") else fake

    env.ctx.slurm = SlurmAccess(
        env.manager.cache, connect=to, clock=EveryLookIsLater(), registry=env.manager.metrics.registry
    )


async def test_an_answer_over_the_cap_is_named_in_its_cluster_s_condition_and_the_other_cluster_goes_on(
    caplog: pytest.LogCaptureFixture,
) -> None:
    _, handler = streaming(GIB, content_length=False)
    async with (
        Env() as env,
        serve({("GET", QOS): handler, ("GET", NODES): handler}) as (url, _),
        aiohttp.ClientSession() as session,
    ):
        env.secret("db", {"pw": PASSWORD.encode()})
        for name in (NAME, BIG):
            await env.available(spec(accounting=LIMITS), name=name)
        fake = FakeSlurm()
        route(env, fake, SlurmClient(session=session, base_url=url, token=str, max_answer_bytes=CAP))
        caplog.set_level(logging.WARNING)

        for _ in range(2):
            await env.run("accounting", name=BIG)
            await env.run("accounting", name=NAME)
        cond = env.condition("LimitsApplied", name=BIG)
        assert cond is not None
        message = f"the accounts and QOS of spec.accounting cannot be applied yet: slurmrestd GET {QOS}: {CAPPED}"
        assert (cond["status"], cond["reason"], cond["message"]) == ("False", "SlurmUnreachable", message)
        assert [e for e in env.events() if CAPPED in e[2]] == [("Warning", "SlurmUnreachable", message)], "said once"
        other = env.condition("LimitsApplied")
        assert other is not None and (other["status"], other["reason"]) == ("True", "Applied")

        # The node loop: the same refusal, one WARNING line however often it recurs; the other cluster is read.
        fake.add_node(f"{NAME}-worker-cpu-0")
        for _ in range(2):
            assert await env.poll_slurm(name=BIG) == Result(requeue_after=15.0)
            await env.poll_slurm()
        lines = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING and CAPPED in r.getMessage()]
        node_loop = [line for line in lines if line.startswith("cannot read Slurm")]
        assert len(node_loop) == 1 and f"slurmrestd GET {NODES.split('?')[0]}: {CAPPED}" in node_loop[0], lines
        assert len(lines) == 2, "besides the accounting Event's own line"
        assert env.cluster()["status"]["slurmNodes"]["total"] == 1
        metrics = generate_latest(env.manager.metrics.registry).decode()
        assert f'slurm_up{{cluster="{BIG}",namespace="{NS}"}} 0.0' in metrics
        assert f'slurm_up{{cluster="{NAME}",namespace="{NS}"}} 1.0' in metrics


async def test_the_operator_s_cap_reaches_the_clients_it_makes() -> None:
    async with Env() as env:
        connect(env, FakeSlurm())
        options = ManagerOptions(metrics_bind_address="0", health_probe_bind_address="0", handle_signals=False)
        manager = Manager(env.fake, options, cache=env.fake.cache_factory)
        ctx = await register(manager, slurm_max_answer_bytes=CAP)  # as `slurmctl run` does with the flag
        try:
            made = ctx.slurm.client(NAME, NS)
            assert isinstance(made, SlurmClient) and made.max_answer_bytes == CAP
        finally:
            await ctx.slurm.aclose()
