"""What a manager's memory holds right now: blocks used and free, tokens, empty slots."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Usage:
    num_blocks: int
    blocks_used: int
    blocks_free: int
    tokens_stored: int  # physical token slots holding data (a shared prefix counts once)
    logical_tokens: int  # sum of every sequence's length (a shared prefix counts per owner)
    empty_slots: int  # allocated slots with no token yet: internal fragmentation

    @property
    def utilization(self) -> float:
        """Fraction of allocated slots that hold a token."""
        slots = self.tokens_stored + self.empty_slots
        return self.tokens_stored / slots if slots else 1.0
