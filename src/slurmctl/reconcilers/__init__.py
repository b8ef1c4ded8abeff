"""One reconciler per Slurm component, all keyed by the SlurmCluster."""
