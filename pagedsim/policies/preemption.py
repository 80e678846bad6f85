"""Preemption under memory pressure: one class per policy, one registry (vLLM paper Sec. 4.5).

Swap and group preemption follow vLLM v0 (v1 only recomputes). The scheduler picks a
victim *group* (a request's sequences, which share blocks) and hands it to a policy:

    recompute  free every block of the group and requeue it; its prompt and generated
               tokens are prefilled again. Counted: `recomputed_tokens`.
    swap       copy the group's distinct blocks into a fixed host (CPU) pool, free the GPU
               blocks, later bring them back into fresh ones, keeping the sharing.
               Counted: `bytes_swapped`. A full host pool falls back to recompute.

The (gpu, host) / (host, gpu) pairs wait in `drain_swaps()` for `cuda_kernels.swap_out` /
`swap_in`. A new policy is one class (`name`, `keeps_kv`, `preempt`, `swap_in`, `make`) and
one entry in `PREEMPTION`; every `--preemption-mode` takes its choices from the registry.
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..block_table import NULL_BLOCK
from ..errors import choice_arg, count_arg

if TYPE_CHECKING:
    from ..manager import KVCacheManager

Saved = dict[Hashable, tuple[list[int], int]]  # seq -> (host block per logical block, tokens)

MAX_NUM_CPU_BLOCKS = 1 << 24  # the host pool is a Python list of free ids


@dataclass
class Group:
    """One request's sequences, as the scheduler and the policies see them."""

    key: object  # the request's index in the trace
    prompt_len: int
    output_len: int
    seq_ids: list[Any]  # its live sequence ids
    generated: int = 0  # decode steps done (every sequence of a group is at the same length)
    order: int = 0  # admission counter: larger = admitted more recently
    # seq -> (host block ids, num_tokens) while swapped
    swapped: Saved = field(default_factory=dict)


class HostPool:
    """A fixed pool of host (CPU) blocks for swapped-out sequences (vLLM v0's swap space)."""

    def __init__(self, num_cpu_blocks: int) -> None:
        self.num_cpu_blocks = count_arg("num_cpu_blocks", num_cpu_blocks, 0, MAX_NUM_CPU_BLOCKS)
        self._free = list(range(self.num_cpu_blocks - 1, -1, -1))  # a stack; pop() gives 0 first
        # swapped seq -> its manager's prefix_state (None: none kept)
        self._prefix: dict[Hashable, Any] = {}

    @property
    def num_free(self) -> int:
        return len(self._free)

    def swap_out(
        self, manager: KVCacheManager, seq_ids: list[Any]
    ) -> tuple[list[tuple[int, int]], Saved] | None:
        """Free the sequences' blocks into host blocks (shared ones copied once): ((gpu, host)
        pairs, {seq: (labels, num_tokens)}), or None, nothing changed, if the host is short."""
        tables = {s: manager.block_table(s) for s in seq_ids}
        distinct = list(dict.fromkeys(b for t in tables.values() for b in t if b != NULL_BLOCK))
        if len(distinct) > len(self._free):
            return None
        host = {b: self._free.pop() for b in distinct}
        saved: Saved = {
            s: ([host.get(b, NULL_BLOCK) for b in t], t.num_tokens) for s, t in tables.items()
        }
        for s in tables:
            self._prefix[s] = manager.prefix_state(s)  # a prefix cache's hashes come back too
            manager.free_sequence(s)
        return [(b, host[b]) for b in distinct], saved

    @staticmethod
    def blocks_to_swap_in(saved: Saved) -> int:
        return len({b for labels, _ in saved.values() for b in labels if b != NULL_BLOCK})

    def swap_in(self, manager: KVCacheManager, saved: Saved) -> list[tuple[int, int]] | None:
        """Bring saved sequences back into fresh GPU blocks, keeping their sharing: the
        (host, gpu) pairs, or None, nothing changed, when the GPU blocks are too few."""
        if self.blocks_to_swap_in(saved) > manager.num_free_blocks:
            return None
        prefix = {s: self._prefix[s] for s in saved if s in self._prefix}
        gpu = manager.restore_sequences(saved, prefix)  # host block -> new GPU block
        for s in prefix:
            del self._prefix[s]
        self._free += list(gpu)
        return list(gpu.items())


class RecomputePolicy:
    name = "recompute"
    keeps_kv = False  # a preempted group is recomputed when it is admitted again

    @classmethod
    def make(cls, **options: Any) -> RecomputePolicy:
        return cls()

    def __init__(self) -> None:
        self.preemptions = 0  # groups preempted
        self.recomputed_tokens = 0  # tokens whose KV was discarded (cache hits not subtracted)

    def preempt(self, manager: KVCacheManager, group: Group) -> str:
        """Free the group's blocks. Returns "recompute": the scheduler requeues it."""
        self.preemptions += 1
        self.recomputed_tokens += group.prompt_len + len(group.seq_ids) * group.generated
        for s in group.seq_ids:
            manager.free_sequence(s)
        return "recompute"

    def swap_in(self, manager: KVCacheManager, group: Group) -> bool:
        return False  # nothing is kept: the group waits to be recomputed


class SwapPolicy(RecomputePolicy):
    name = "swap"
    keeps_kv = True  # a preempted group waits on the host until it is swapped back in

    @classmethod
    def make(
        cls, *, num_cpu_blocks: int = 0, block_bytes: int = 1, **options: Any
    ) -> RecomputePolicy:
        return cls(num_cpu_blocks, block_bytes)

    def __init__(self, num_cpu_blocks: int, block_bytes: int = 1) -> None:
        super().__init__()
        self.host = HostPool(num_cpu_blocks)
        self.num_cpu_blocks = self.host.num_cpu_blocks  # size of the fixed host pool, in blocks
        self.block_bytes = count_arg("block_bytes", block_bytes, 1)  # bytes of one block
        self.bytes_swapped = 0  # bytes moved over PCIe, both directions
        self.swap_outs = 0
        self._pairs_out: list[tuple[int, int]] = []  # (gpu, host) awaiting swap_out
        self._pairs_in: list[tuple[int, int]] = []  # (host, gpu) awaiting swap_in

    @property
    def host_free(self) -> int:
        return self.host.num_free

    def drain_swaps(self) -> tuple[list[tuple[int, int]], list[tuple[int, int]]]:
        out, inn = self._pairs_out, self._pairs_in
        self._pairs_out, self._pairs_in = [], []
        return out, inn

    def preempt(self, manager: KVCacheManager, group: Group) -> str:
        moved = self.host.swap_out(manager, group.seq_ids)
        if moved is None:
            return super().preempt(manager, group)  # no host room: fall back to recompute
        pairs, group.swapped = moved
        self._pairs_out += pairs
        self.preemptions += 1
        self.swap_outs += 1
        self.bytes_swapped += len(pairs) * self.block_bytes
        return "swap"

    def swap_in(self, manager: KVCacheManager, group: Group) -> bool:
        """Bring a swapped group back if its blocks fit; False (and no change) if not."""
        pairs = self.host.swap_in(manager, group.swapped)
        if pairs is None:
            return False
        self._pairs_in += pairs
        group.swapped = {}
        self.bytes_swapped += len(pairs) * self.block_bytes
        return True


# name -> class: the one place a preemption policy is registered (see the module doc)
PREEMPTION: dict[str, type[RecomputePolicy]] = {
    cls.name: cls for cls in (RecomputePolicy, SwapPolicy)
}
PREEMPTION_POLICIES = tuple(PREEMPTION)


def preemption_class(name: str) -> type[RecomputePolicy]:
    """The registered class of a policy name (TypeError / ValueError for a bad name)."""
    return PREEMPTION[choice_arg("preemption policy", name, tuple(PREEMPTION))]


def make_policy(name: str, *, num_cpu_blocks: int = 0, block_bytes: int = 1) -> RecomputePolicy:
    """A preemption policy by name, from PREEMPTION."""
    return preemption_class(name).make(num_cpu_blocks=num_cpu_blocks, block_bytes=block_bytes)
