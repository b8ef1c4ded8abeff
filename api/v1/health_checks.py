"""`spec.healthChecks`: the checks that find broken GPU nodes and drain them, the quick one slurmd runs as its
HealthCheckProgram and the periodic NCCL bandwidth benchmark.
"""

from __future__ import annotations

from pydantic import Field

from .fields import image_field
from .types import ApiModel, Quantity, ResourceRequirements, Scheduling


class GpuHealthCheck(ApiModel):
    """The quick GPU check slurmd runs as HealthCheckProgram on GPU nodes."""

    enabled: bool = Field(True, description="Run the check on nodes of groups with GPUs; failing nodes are drained.")
    interval_seconds: int = Field(60, ge=10, le=86_400, description="HealthCheckInterval: seconds between checks.")


class NcclBenchmark(Scheduling):
    """A periodic NCCL all_reduce_perf run on every GPU node that drains nodes below a bandwidth threshold. Its
    placement is that of the CronJob's pod, a Slurm client that submits the runs, not of the runs themselves (those
    run on the GPU workers)."""

    enabled: bool = Field(False, description="Create the benchmark CronJob (needs a worker group with GPUs).")
    schedule: str = Field(
        "0 */3 * * *",
        max_length=128,
        pattern=r"^(@(yearly|annually|monthly|weekly|daily|midnight|hourly)|\S+( +\S+){4})$",
        description="Cron schedule of the benchmark, e.g. '0 */3 * * *'.",
    )
    image: str | None = image_field("nccl-benchmark")
    min_bus_bandwidth_gbps: float = Field(
        0.0,
        ge=0,
        alias="minBusBandwidthGBps",
        description="Required average bus bandwidth in GB/s; 0 only checks that the benchmark runs.",
    )
    drain_on_failure: bool = Field(True, description="Drain a node whose run fails or is below the threshold.")
    min_bytes: Quantity = Field("512Mi", description="Smallest message size of all_reduce_perf (-b).")
    max_bytes: Quantity = Field("8Gi", description="Largest message size of all_reduce_perf (-e).")
    step_factor: int = Field(2, ge=2, le=1024, description="Factor between message sizes (-f).")
    timeout_seconds: int = Field(
        1800, ge=60, le=86_400, description="Seconds a benchmark run may take before it counts as failed."
    )
    resources: ResourceRequirements = Field(
        default_factory=lambda: ResourceRequirements(
            requests={"cpu": "100m", "memory": "128Mi"}, limits={"memory": "1Gi"}
        ),
        description="Compute resources of the CronJob's container (it submits the runs and waits for them).",
    )


class HealthChecks(ApiModel):
    """Checks that find broken GPU nodes and drain them."""

    gpu: GpuHealthCheck = Field(default_factory=GpuHealthCheck, description="Quick GPU check on every GPU node.")
    nccl_benchmark: NcclBenchmark = Field(
        default_factory=NcclBenchmark, description="Periodic NCCL bandwidth benchmark."
    )
