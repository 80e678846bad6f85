"""The prefix cache and sliding windows: v0- and v1-shaped calls, eviction, window hits."""
