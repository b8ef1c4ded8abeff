"""Record real slurmrestd 24.11 answers into test/unit/slurm/recorded/*.json, for the client's unit tests.

    .venv/bin/python -m test.unit.slurm.record [--out DIR]

Starts a local Slurm with slurmrestd (hack/local-slurm.sh, LOCAL_SLURM_REST=1), walks the node and its jobs through
the states the tests replay (idle, drained, mixed, allocated, draining; jobs completed, running, pending), records
each answer as {"request", "status", "content_type", "json" | "text"}, and stops the instance. Requests go out with
urllib, not with the client under test, so a client bug cannot shape its own test data. Tokens are never written.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from tempfile import TemporaryDirectory
from typing import Any

from slurmctl.slurm import API_VERSION, mint_token
from slurmctl.slurm.client import JOBS_QUERY, NODES_QUERY, PARTITIONS_QUERY
from test.e2e.slurm.local_slurm import LocalSlurm, local_slurm_instance
from test.waiting import until

HERE = Path(__file__).resolve().parent
PREFIX = f"/slurm/{API_VERSION}"
# The queries the client sends.
NODES = f"{PREFIX}/nodes/?{urllib.parse.urlencode(NODES_QUERY)}"
JOBS = f"{PREFIX}/jobs/?{urllib.parse.urlencode(JOBS_QUERY)}"
PARTITIONS = f"{PREFIX}/partitions/?{urllib.parse.urlencode(PARTITIONS_QUERY)}"
# A second node that exists only in slurmctld (no slurmd): created with `scontrol create`, deleted over REST.
DYNAMIC_NODE = "dyn1"


class Recorder:
    def __init__(self, slurm: LocalSlurm, out: Path) -> None:
        assert slurm.rest_url is not None and slurm.jwt_key is not None
        self.slurm = slurm
        self.url = slurm.rest_url
        self.key = slurm.jwt_key.read_bytes()
        self.out = out

    def token(self, key: bytes | None = None) -> str:
        return mint_token(key or self.key, user="root", lifetime=timedelta(minutes=10), now=datetime.now(UTC))

    def call(
        self, method: str, path: str, body: Any = None, *, token: str | None = "", save: str = ""
    ) -> dict[str, Any]:
        headers = {"Accept": "application/json"}
        if token is not None:
            headers["X-SLURM-USER-NAME"] = "root"
            headers["X-SLURM-USER-TOKEN"] = token or self.token()
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            headers["Content-Type"] = "application/json"
        request = urllib.request.Request(self.url + path, data=data, method=method, headers=headers)
        try:
            with urllib.request.urlopen(request, timeout=30) as resp:
                status, ctype, raw = resp.status, resp.headers.get_content_type(), resp.read()
        except urllib.error.HTTPError as exc:
            status, ctype, raw = exc.code, exc.headers.get_content_type(), exc.read()
        record: dict[str, Any] = {
            "request": {"method": method, "path": path, **({"json": body} if body is not None else {})},
            "status": status,
            "content_type": ctype,
        }
        try:
            record["json"] = json.loads(raw)
        except ValueError:
            record["text"] = raw.decode(errors="replace")
        if save:
            (self.out / f"{save}.json").write_text(json.dumps(record, indent=2, sort_keys=True) + "\n")
            print(f"recorded {save}: {method} {path} -> {status}")
        return record

    def wait(self, probe: Callable[[], bool], what: str, timeout: float = 60) -> None:
        try:
            until(probe, timeout=timeout, what=what, interval=0.2)
        except AssertionError as exc:
            squeue = self.slurm.run("squeue", "--all", check=False).stdout
            raise SystemExit(f"{exc}; node: {self.node()}\n{squeue}") from None

    def node(self) -> dict[str, Any]:
        nodes = self.call("GET", NODES)["json"]["nodes"]
        return next(n for n in nodes if n["name"] == self.slurm.node)

    def job_state(self, job_id: int) -> list[str]:
        jobs = self.call("GET", JOBS)["json"]["jobs"]
        return next(j["job_state"] for j in jobs if j["job_id"] == job_id)

    def sbatch(self, *args: str) -> int:
        out = self.slurm.run("sbatch", "--parsable", "--output=/dev/null", *args).stdout
        return int(out.strip().split(";")[0])

    def set_state(self, state: str, *, reason: str = "", save: str = "") -> None:
        body: dict[str, Any] = {"name": [self.slurm.node], "state": [state]}
        if reason:
            body["reason"] = reason
        record = self.call("POST", f"{PREFIX}/nodes/", body, save=save)
        assert record["status"] == 200, record


def record(out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    with (
        TemporaryDirectory(prefix="slurmctl-record-") as tmp,
        local_slurm_instance(Path(tmp), plugin="none", rest=True, extra_conf="MaxNodeCount=4") as slurm,
    ):
        r = Recorder(slurm, out)
        r.call("GET", f"{PREFIX}/ping/", save="ping")
        r.call("GET", NODES, save="nodes_idle")
        r.call("GET", PARTITIONS, save="partitions")

        r.set_state("DRAIN", reason="slurmctl: recorded drain", save="drain")
        r.wait(lambda: "DRAIN" in r.node()["state"], "the drain")
        r.call("GET", NODES, save="nodes_drained")
        r.set_state("RESUME", save="resume")
        r.wait(lambda: r.node()["state"] == ["IDLE"], "the node to be idle again")

        done = r.sbatch("--job-name=done", "--wrap=true")
        r.wait(lambda: r.job_state(done) == ["COMPLETED"], "the first job to complete")
        fails = r.sbatch("--job-name=fails", "--wrap=exit 3")
        r.wait(lambda: r.job_state(fails) == ["FAILED"], "the failing job to fail")
        cpus = r.node()["cpus"]
        one = r.sbatch("--job-name=one-cpu", "-n1", "--wrap=sleep 600")
        r.wait(lambda: r.job_state(one) == ["RUNNING"], "the one-CPU job to run")
        r.wait(lambda: "MIXED" in r.node()["state"] or cpus == 1, "the node to be mixed")
        if cpus > 1:
            r.call("GET", NODES, save="nodes_mixed")
            rest = r.sbatch("--job-name=rest", f"-n{cpus - 1}", "--wrap=sleep 600")
            r.wait(lambda: r.job_state(rest) == ["RUNNING"], "the job on the other CPUs to run")
        r.wait(lambda: "ALLOCATED" in r.node()["state"], "the node to be allocated")
        r.call("GET", NODES, save="nodes_allocated")
        waiting = r.sbatch("--job-name=waiting", "-n1", "--wrap=sleep 600")
        r.wait(lambda: r.job_state(waiting) == ["PENDING"], "the third job to pend")
        r.call("GET", JOBS, save="jobs")
        r.set_state("DRAIN", reason="slurmctl: scale-in", save="")
        r.wait(lambda: "DRAIN" in r.node()["state"], "the drain of a busy node")
        r.call("GET", NODES, save="nodes_draining")
        slurm.run("scancel", "--user=root")
        r.wait(lambda: r.node()["state"] == ["IDLE", "DRAIN"], "the jobs to end")
        r.set_state("RESUME")

        r.call("POST", f"{PREFIX}/nodes/", {"name": ["nosuch"], "state": ["DRAIN"], "reason": "x"}, save="error_drain")
        r.call("GET", f"{PREFIX}/node/nosuch", save="error_node_unknown")
        r.call("DELETE", f"{PREFIX}/node/{slurm.node}", save="error_delete_static")
        r.call("GET", NODES, token=None, save="unauthorized")
        r.call("GET", NODES, token=r.token(b"not-the-key-not-the-key-not-the!"), save="bad_token")
        slurm.run("scontrol", "create", f"NodeName={DYNAMIC_NODE}", "CPUs=1", "State=FUTURE")
        r.call("GET", NODES, save="nodes_future")
        r.call("DELETE", f"{PREFIX}/node/{DYNAMIC_NODE}", save="delete_node")
        # Last: slurmctld 24.11 restarts itself on reconfigure, and nodes read UNKNOWN until their slurmd registers.
        r.call("GET", f"{PREFIX}/reconfigure/", save="reconfigure")
        r.wait(lambda: r.node()["state"] == ["IDLE"], "the node idle after the reconfigure")
        # slurmctld gone: slurmrestd still answers ping (200, responding false) and fails the rest (502, ~9 s).
        os.kill(slurm.pid("slurmctld"), signal.SIGTERM)
        r.wait(lambda: not Path(f"/proc/{slurm.pid('slurmctld')}").exists(), "slurmctld to exit")
        r.call("GET", f"{PREFIX}/ping/", save="ctld_down_ping")
        r.call("GET", NODES, save="ctld_down_nodes")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=HERE / "recorded")
    record(parser.parse_args().out)


if __name__ == "__main__":
    main()
