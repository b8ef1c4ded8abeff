"""Pure renderers: SlurmCluster spec -> manifests and Slurm config text. No I/O, no asyncio."""
