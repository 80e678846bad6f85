"""vLLM's own v1 core tests, re-told on pagedsim (each file names the vLLM commit read)."""
