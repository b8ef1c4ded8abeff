"""The SlurmCluster API, shipped as `slurmctl.api`."""
