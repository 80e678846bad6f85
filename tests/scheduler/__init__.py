"""The v0 and v1 schedulers, and a plain emulation of v1's rules to compare them with."""
