"""A real local Slurm instance (hack/local-slurm.sh) for tests: start, run clients against it, read its logs, stop."""

from __future__ import annotations

import os
import pwd
import subprocess
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
SCRIPT = REPO / "hack" / "local-slurm.sh"
PLUGIN = REPO / "native" / "spank_chroot" / "chroot.so"
# A non-root user for jobs, present on the host and in the test jail's /etc/passwd.
TEST_USER = "slurmctl-e2e"


@dataclass(frozen=True)
class LocalSlurm:
    """A running instance: `env` is what Slurm clients need (SLURM_CONF), `jail` the jail's root on the host."""

    state_dir: Path
    env: dict[str, str]
    node: str
    jail: Path
    user: str

    def run(
        self,
        *argv: str,
        timeout: float = 60,
        check: bool = True,
        input: str | None = None,
        cwd: str | Path = "/",
    ) -> subprocess.CompletedProcess[str]:
        """Run a Slurm client. The default cwd "/" exists in the jail: steps start in the submitter's directory."""
        proc = subprocess.run(
            list(argv), env=self.env, cwd=cwd, input=input, capture_output=True, text=True, timeout=timeout, check=False
        )
        if check and proc.returncode != 0:
            raise AssertionError(
                f"{' '.join(argv)} failed ({proc.returncode}):\nstdout: {proc.stdout}\nstderr: {proc.stderr}\n"
                f"slurmd log tail:\n{self.log_tail('slurmd')}"
            )
        return proc

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

    def wait_until(self, probe: Callable[[], object], *, timeout: float = 30, what: str = "condition") -> None:
        """Poll `probe` until truthy; fail naming `what` when the deadline passes."""
        deadline = time.monotonic() + timeout
        while not probe():
            if time.monotonic() >= deadline:
                raise AssertionError(f"timed out after {timeout}s waiting for {what}")
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
) -> Iterator[LocalSlurm]:
    """Start an instance in `state_dir` with the chroot plugin loaded (jail= `jail`, default the built busybox jail)."""
    extra = {"LOCAL_SLURM_JAIL_USERS": " ".join(jail_users)}
    if jail is not None:
        extra["LOCAL_SLURM_JAIL"] = str(jail)
    if extra_conf:
        extra["LOCAL_SLURM_EXTRA_CONF"] = extra_conf
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
        )
    finally:
        down = local_slurm_script("down", state_dir)
        if down.returncode != 0:
            print(f"local Slurm teardown failed:\n{down.stderr}")
