"""The jail's volume and sub-mounts in a spec: where a sub-mount may go inside the jail, which every worker and login
node shares and users write (images/scripts/complement-jail checks the same on each node, where the jail's own
symlinks and permissions are seen)."""

from __future__ import annotations

import posixpath

from .problems import Problem, duplicates
from .spec import SlurmClusterSpec
from .types import VolumeRef

# Paths complement-jail mounts or binds inside the jail (images/scripts/complement-jail): a sub-mount on, above or
# below one of them would hide what Slurm, munge and the chroot plugin need, or expose the node's own.
RESERVED_JAIL_PATHS = ("/proc", "/dev", "/sys", "/etc/slurm", "/run/munge", "/usr/lib/slurmctl")
# Where root in the jail (slurmstepd included) finds programs, libraries and configuration, and the world-writable
# /tmp: no sub-mount covers any of them, since whoever writes the volume would decide what root runs. complement-jail
# refuses the same on each node (its system_path), where a symlink in the jail could lead a mount there.
SYSTEM_JAIL_DIRS = (
    "/bin",
    "/boot",
    "/etc",
    "/lib",
    "/lib32",
    "/lib64",
    "/libx32",
    "/run",
    "/sbin",
    "/tmp",  # noqa: S108 - a path inside the jail, refused, not a file used here
    "/usr",
    "/var",
)


def check_volume(volume: VolumeRef, where: str) -> list[Problem]:
    given = [name for name, value in (("claimName", volume.claim_name), ("source", volume.source)) if value]
    if len(given) != 1:
        return [Problem(where, f"set exactly one of claimName and source (got {', '.join(given) or 'neither'})")]
    if volume.source is not None and len(volume.source) != 1:
        return [Problem(f"{where}.source", "a volume source has exactly one key, e.g. nfs or hostPath")]
    return []


def check_jail(spec: SlurmClusterSpec, path: str) -> list[Problem]:
    """spec.jail: its volume, and each sub-mount's name (unique), volume and path (unique, and where it may go)."""
    base = f"{path}.jail"
    problems = check_volume(spec.jail.volume, f"{base}.volume")
    problems += duplicates([mount.name for mount in spec.jail.sub_mounts], f"{base}.subMounts", "sub-mount")
    paths: dict[str, int] = {}
    for index, mount in enumerate(spec.jail.sub_mounts):
        where = f"{base}.subMounts[{index}]"
        problems += check_volume(mount.volume, f"{where}.volume")
        problem = _mount_path_problem(mount.mount_path)
        if problem is not None:
            problems.append(Problem(f"{where}.mountPath", problem))
        elif mount.mount_path in paths:
            problems.append(
                Problem(
                    f"{where}.mountPath",
                    f"{mount.mount_path} is mounted twice (also {base}.subMounts[{paths[mount.mount_path]}])",
                )
            )
        else:
            paths[mount.mount_path] = index
    return problems


def _mount_path_problem(path: str) -> str | None:
    """What is wrong with a sub-mount's path inside the jail, if anything.

    Only clean absolute paths (no `.`, `..`, empty or trailing components): complement-jail mounts exactly the path
    given, and `..` must never lead it anywhere but where the spec appears to say.
    """
    clean = "/" + posixpath.normpath(path).lstrip("/") if path.startswith("/") else ""
    if path != clean:
        suggestion = f" (did you mean {clean}?)" if clean and clean != "/" else ""
        return f"{path} is not a clean absolute path: no '.', '..', '//' or trailing '/'{suggestion}"
    if path == "/":
        return "cannot mount over the jail's root"
    for reserved in RESERVED_JAIL_PATHS:
        if path == reserved or reserved.startswith(path + "/") or path.startswith(reserved + "/"):
            return f"{path} would cover or sit inside {reserved}, which slurmctl mounts into the jail itself"
    for system in SYSTEM_JAIL_DIRS:
        if path == system or path.startswith(system + "/"):
            return f"{path} is a system directory of the jail: root there would run or read what the volume holds"
    return None
