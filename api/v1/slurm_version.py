"""The Slurm lines slurmctl's images carry, their image tags, and which moves between them Slurm supports.

Slurm's upgrade guide (https://slurm.schedmd.com/upgrades.html, "Compatibility Window"): since 24.11 a release accepts
messages, state files and database records of the previous three major releases (before 24.11: two), so a cluster may
go from 24.11 straight to 26.05 (25.05, 25.11 and 26.05 follow 24.11), and never back: a daemon cannot read state a
newer release wrote. The order of an upgrade (slurmdbd, slurmctld, slurmd, then the commands) is the guide's too; it
is carried out by reconcilers/upgrade.py.
"""

from __future__ import annotations

from typing import Final, Literal, get_args

SlurmVersion = Literal["24.11", "26.05"]
SLURM_VERSIONS: Final[tuple[SlurmVersion, ...]] = get_args(SlurmVersion)
DEFAULT_SLURM_VERSION: Final[SlurmVersion] = "24.11"

# Every major release since 23.02, in order: how far apart two lines are is counted here, not from their numbers
# (the cycle was 9 months before 24.05, 6 months since).
SLURM_RELEASES: Final = ("23.02", "23.11", "24.05", "24.11", "25.05", "25.11", "26.05", "26.11", "27.05")
# The first release that accepts three prior releases (the two before it accept two).
_THREE_PRIOR_SINCE: Final = "24.11"

# What the default image tag gets for each line: images/lines/<line>.pins' tag-suffix (a unit test compares them).
IMAGE_TAG_SUFFIX: Final[dict[str, str]] = {"24.11": "", "26.05": "-slurm26.05"}


def supported_prior_releases(to: str) -> int:
    """How many major releases before `to` Slurm `to` upgrades from in place."""
    return 3 if SLURM_RELEASES.index(to) >= SLURM_RELEASES.index(_THREE_PRIOR_SINCE) else 2


def upgrade_refusal(from_: str, to: str) -> str | None:
    """Why Slurm cannot move a running cluster from line `from_` to line `to`; None when it can (or they are equal)."""
    if from_ == to:
        return None
    if from_ not in SLURM_RELEASES or to not in SLURM_RELEASES:
        return f"Slurm {from_} to {to}: slurmctl knows no such Slurm release"
    steps = SLURM_RELEASES.index(to) - SLURM_RELEASES.index(from_)
    if steps < 0:
        return (
            f"a downgrade from Slurm {from_} to {to}: Slurm cannot read the state and database records a newer "
            f"release wrote; set spec.slurm.version back to {from_}"
        )
    allowed = supported_prior_releases(to)
    if steps > allowed:
        return (
            f"Slurm {to} upgrades only from the {allowed} major releases before it "
            f"({', '.join(SLURM_RELEASES[SLURM_RELEASES.index(to) - allowed : SLURM_RELEASES.index(to)])}), "
            f"not from {from_}: upgrade through an intermediate release first"
        )
    return None
