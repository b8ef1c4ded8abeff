"""SlurmCluster v1: spec and status models, defaults and semantic validation."""
