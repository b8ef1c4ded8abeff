"""`spec.containers`: container jobs, through Slurm's own OCI support (oci.conf, crun from the jail) or through the
pyxis SPANK plugin for images that bring it.
"""

from __future__ import annotations

from pydantic import Field

from .fields import OptionValue
from .types import ApiModel


class PyxisPlugin(ApiModel):
    """NVIDIA's pyxis SPANK plugin (`srun --container-image`, with enroot), for worker and jail images that bring it:
    slurmctl's own images do not (neither is packaged by Debian). Its plugstack.conf line comes after the jail's."""

    enabled: bool = Field(False, description="Load pyxis from plugstack.conf (the images must contain it).")
    path: str = Field(
        "spank_pyxis.so",
        max_length=1024,
        pattern=r"^[^\s#\x00-\x1f\x7f]+$",
        description="The plugin: an absolute path, or a file name in Slurm's PluginDir.",
    )
    required: bool = Field(
        True, description="required: a plugin that fails to load fails the job; optional: the job runs without it."
    )
    arguments: dict[str, OptionValue] = Field(
        default_factory=lambda: {"container_scope": "global", "execute_entrypoint": "0", "sbatch_support": "1"},
        max_length=32,
        description="Plugin arguments as key=value (pyxis: runtime_path, remap_root, execute_entrypoint, "
        "container_scope, sbatch_support, ...).",
    )


class ContainersSpec(ApiModel):
    """Container jobs. With `enabled`, Slurm's own OCI support runs `srun --container=<bundle>`: the bundle (an OCI
    runtime bundle, config.json + rootfs) lives in the jail, and crun from the jail runs it as the job's user, rootless
    (its own user namespace: container root is the user outside). Off by default."""

    enabled: bool = Field(False, description="Render oci.conf so that `srun --container=<bundle>` runs OCI bundles.")
    pyxis: PyxisPlugin = Field(
        default_factory=PyxisPlugin, description="The pyxis SPANK plugin, for images that bring pyxis and enroot."
    )
