"""Workloads: seeded synthetic traces and CSV traces."""
