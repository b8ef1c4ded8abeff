"""Plugins for every run of the suite: test.timing prints the time each module took (and how much of it went to waiting
for SlurmClusters to become Available) before pytest's final summary line."""

pytest_plugins = ["test.timing"]
