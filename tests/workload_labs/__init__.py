"""The labs over workloads: memory waste, block-size sweep, policy comparison, their figures."""
