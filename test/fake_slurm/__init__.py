"""Slurm as the tests and the scale harness see it without slurmctld: one in-memory model (model.py), called
in-process by unit tests or served over slurmrestd's REST API (restd.py)."""
