"""A real local Slurm instance (hack/local-slurm.sh) for tests: start, run clients against it, read logs, stop.

Slurm 24.11 by default; SLURM_LINE=26.05 in the environment runs the whole suite against Debian testing's 26.05. The
daemons run inside a Debian root filesystem (trixie, or forky for 26.05) in a mount namespace of their own; clients
must run in that namespace too (`LocalSlurm.run`, `LocalSlurm.command`). /tmp, the repository and the state directory
are visible there at the same paths as on the host, so tests can hand paths from `tmp_path` to jobs and read what the
jobs wrote.
"""

from __future__ import annotations

import os
import pwd
import subprocess
import time
import warnings
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
SCRIPT = REPO / "hack" / "local-slurm.sh"
PLUGIN = REPO / "native" / "spank_chroot" / "chroot.so"
# A non-root user for jobs, present on the host and in the test jail's /etc/passwd.
TEST_USER = "slurmctl-e2e"


def in_rootfs(*argv: str, user: str | None = None, fresh: bool = False) -> list[str]:
    """The argv that runs `argv` inside the Slurm root filesystem: in the instance named by LOCAL_SLURM_DIR in the
    environment it is run with, or (`fresh`, or no instance up) in a namespace of its own; as `user` when given."""
    prefix = ["bash", str(SCRIPT), "run"]
    if user is not None:
        prefix += ["--user", user]
    if fresh:
        prefix.append("--fresh")
    return [*prefix, "--", *argv]


@dataclass(frozen=True)
class LocalSlurm:
    """A running instance: `env` is what Slurm clients need (SLURM_CONF, LOCAL_SLURM_DIR), `jail` the jail's root."""

    state_dir: Path
    env: dict[str, str]
    node: str
    jail: Path
    user: str
    # With `rest=True`: slurmrestd's base URL and the JWT key slurmctld checks tokens against.
    rest_url: str | None = None
    jwt_key: Path | None = None

    def command(self, *argv: str, user: str | None = None) -> list[str]:
        """The argv that runs `argv` (a Slurm client, or a script calling them) in this instance's namespace, as
        `user` (default root); run it with `self.env` (or an env holding its LOCAL_SLURM_DIR)."""
        return in_rootfs(*argv, user=user)

    def run(
        self,
        *argv: str,
        timeout: float = 60,
        check: bool = True,
        input: str | None = None,
        cwd: str | Path = "/",
        user: str | None = None,
    ) -> subprocess.CompletedProcess[str]:
        """Run a Slurm client in the instance's namespace, as `user` (default root). The default cwd "/" exists in
        the jail: steps start in the submitter's directory."""
        proc = subprocess.run(
            self.command(*argv, user=user),
            env=self.env,
            cwd=cwd,
            input=input,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        if check and proc.returncode != 0:
            raise AssertionError(
                f"{' '.join(argv)} failed ({proc.returncode}):\nstdout: {proc.stdout}\nstderr: {proc.stderr}\n"
                f"slurmd log tail:\n{self.log_tail('slurmd')}"
            )
        return proc

    @property
    def slurm_line(self) -> str:
        """The Slurm line the instance runs ("24.11" or "26.05": hack/local-slurm.sh's SLURM_LINE when it started)."""
        return (self.state_dir / "slurm-line").read_text().strip()

    def log(self, daemon: str) -> str:
        """The whole log of `slurmd`, `slurmctld` or `munged`."""
        return (self.state_dir / "log" / f"{daemon}.log").read_text(errors="replace")

    def log_tail(self, daemon: str, lines: int = 30) -> str:
        try:
            return "\n".join(self.log(daemon).splitlines()[-lines:])
        except OSError as exc:
            return f"(no log: {exc})"

    def pid(self, daemon: str) -> int:
        return int((self.state_dir / "pids" / daemon).read_text().strip())

    def node_state(self) -> str:
        out = self.run("sinfo", "--noheader", "--nodes", self.node, "--format", "%T").stdout.strip()
        return out

    def job_log(self, job_id: str, lines: int = 80) -> str:
        """What slurmd and the job's slurmstepds (debug level here) said about one job: the last `lines` lines."""
        said = [line for line in self.log("slurmd").splitlines() if job_id in line]
        return "\n".join(said[-lines:])

    def wait_until(
        self,
        probe: Callable[[], object],
        *,
        timeout: float = 30,
        what: str = "condition",
        explain: Callable[[], str] | None = None,
    ) -> None:
        """Poll `probe` until truthy; fail naming `what` (and what `explain` says then) when the deadline passes."""
        deadline = time.monotonic() + timeout
        while not probe():
            if time.monotonic() >= deadline:
                detail = f"\n{explain()}" if explain is not None else ""
                raise AssertionError(f"timed out after {timeout}s waiting for {what}{detail}")
            time.sleep(0.1)


def ensure_test_user(name: str = TEST_USER) -> str:
    """Create the jobs' non-root user once per machine; another session may be creating it at the same time."""
    try:
        pwd.getpwnam(name)
        return name
    except KeyError:
        pass
    proc = subprocess.run(
        ["useradd", "--no-create-home", "--user-group", name], check=False, capture_output=True, text=True
    )
    try:
        pwd.getpwnam(name)
    except KeyError:
        raise AssertionError(f"useradd {name} failed: {proc.stderr}") from None
    return name


def local_slurm_script(
    command: str, state_dir: Path, extra_env: Mapping[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "LOCAL_SLURM_DIR": str(state_dir), **(extra_env or {})}
    return subprocess.run(
        ["bash", str(SCRIPT), command], env=env, capture_output=True, text=True, timeout=600, check=False
    )


@contextmanager
def local_slurm_instance(
    state_dir: Path,
    *,
    jail: Path | None = None,
    jail_users: tuple[str, ...] = (),
    extra_conf: str = "",
    proctrack: str = "",
    task_plugin: str = "",
    cgroup_conf: str = "",
    plugin: str = "",
    daemon_env: Mapping[str, str] | None = None,
    rest: bool = False,
) -> Iterator[LocalSlurm]:
    """Start an instance in `state_dir` with the chroot plugin loaded (jail= `jail`, default the built busybox jail).

    `proctrack`, `task_plugin` and `cgroup_conf` replace ProctrackType (proctrack/linuxproc), TaskPlugin (task/none)
    and cgroup.conf (CgroupPlugin=autodetect, IgnoreSystemd=yes); `plugin="none"` loads no SPANK plugin. `rest`
    also runs slurmrestd with JWT authentication (`rest_url`, `jwt_key`)."""
    extra = {"LOCAL_SLURM_JAIL_USERS": " ".join(jail_users)}
    if jail is not None:
        extra["LOCAL_SLURM_JAIL"] = str(jail)
    if extra_conf:
        extra["LOCAL_SLURM_EXTRA_CONF"] = extra_conf
    if proctrack:
        extra["LOCAL_SLURM_PROCTRACK"] = proctrack
    if task_plugin:
        extra["LOCAL_SLURM_TASK_PLUGIN"] = task_plugin
    if cgroup_conf:
        extra["LOCAL_SLURM_CGROUP_CONF"] = cgroup_conf
    if plugin:
        extra["LOCAL_SLURM_PLUGIN"] = plugin
    extra |= daemon_env or {}
    if rest:
        extra["LOCAL_SLURM_REST"] = "1"
    up = local_slurm_script("up", state_dir, extra)
    if up.returncode != 0:
        # Seen twice in full CI runs, never alone: an instance started right after the others once failed to come up
        # (slurmctld gone before it wrote a line). One more start, and the first failure stays visible in pytest's
        # warnings summary so that it gets looked into rather than hidden.
        warnings.warn(f"local Slurm needed a second start; the first said:\n{up.stdout}\n{up.stderr}", stacklevel=2)
        local_slurm_script("down", state_dir)
        up = local_slurm_script("up", state_dir, extra)
    try:
        if up.returncode != 0:
            raise AssertionError(f"local Slurm did not come up:\n{up.stdout}\n{up.stderr}")
        values = dict(line.split("=", 1) for line in (state_dir / "env").read_text().splitlines() if "=" in line)
        yield LocalSlurm(
            state_dir=state_dir,
            env={**os.environ, **values},
            node=values["LOCAL_SLURM_NODE"],
            jail=Path(values["LOCAL_SLURM_JAIL"]),
            user=jail_users[0] if jail_users else "root",
            rest_url=values.get("SLURMRESTD_URL"),
            jwt_key=Path(values["LOCAL_SLURM_JWT_KEY"]) if "LOCAL_SLURM_JWT_KEY" in values else None,
        )
    finally:
        down = local_slurm_script("down", state_dir)
        if down.returncode != 0:
            print(f"local Slurm teardown failed:\n{down.stderr}")
