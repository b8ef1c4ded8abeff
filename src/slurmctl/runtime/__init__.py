"""A small controller-runtime for asyncio on kubernetes-asyncio. Knows nothing about Slurm."""
