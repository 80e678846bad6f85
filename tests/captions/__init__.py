"""Captions: what a step's caption says a policy did (a window drop, a prefix-cache hit)."""
