"""Preemption under memory pressure: recompute or swap (vLLM paper Sec. 4.5; vLLM's swap_blocks).

Swap and group preemption follow vLLM v0 (v1 is recompute-only, see the scheduler's
mode="v1").

When the running sequences need more blocks than are free, the scheduler picks a
victim *group* (all sequences of one request, since they share blocks) and hands it
to a policy:

    recompute  free every block of the group and requeue it; when it is admitted
               again, its prompt and the tokens it already generated are prefilled
               again. Counted: `recomputed_tokens` (a shared prompt counts once).
    swap       copy the group's distinct blocks into a host (CPU) pool of fixed size,
               free the GPU blocks, and later bring them back into fresh GPU blocks,
               keeping the sharing between the group's sequences. Counted:
               `bytes_swapped` (out and in). If the host pool is full, the group
               falls back to recompute. That fallback is ours: vLLM v0 raises
               instead (RuntimeError "Aborted due to the lack of CPU swap space"),
               and vLLM v1 has no swap at all (it preempts by recompute only,
               relying on the prefix cache).

The (gpu, host) / (host, gpu) pairs wait in `drain_swaps()` for the
`cuda_kernels.swap_out` / `swap_in` launchers, like copy-on-write pairs wait for
`copy_blocks`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..block_table import NULL_BLOCK
from ..errors import count_arg

MAX_HOST_BLOCKS = 1 << 24  # the host pool is a Python list of free ids

PREEMPTION_POLICIES = ("recompute", "swap")


@dataclass
class Group:
    """One request's sequences, as the scheduler and the policies see them."""

    key: object  # the request's index in the trace
    prompt_len: int
    output_len: int
    seq_ids: list  # its live sequence ids
    generated: int = 0  # decode steps done (every sequence of a group is at the same length)
    order: int = 0  # admission counter: larger = admitted more recently
    swapped: dict = field(default_factory=dict)  # seq -> (host block ids, num_tokens) while swapped


class RecomputePolicy:
    name = "recompute"

    def __init__(self):
        self.preemptions = 0  # groups preempted
        # tokens whose KV was discarded (an upper bound; the scheduler's recomputed_tokens
        # subtracts prefix-cache hits on re-admission)
        self.recomputed_tokens = 0

    def preempt(self, manager, group: Group) -> str:
        """Free the group's blocks. Returns "recompute": the scheduler requeues it."""
        self.preemptions += 1
        self.recomputed_tokens += group.prompt_len + len(group.seq_ids) * group.generated
        for s in group.seq_ids:
            manager.free_sequence(s)
        return "recompute"


class SwapPolicy(RecomputePolicy):
    name = "swap"

    def __init__(self, host_blocks: int, block_bytes: int = 1):
        super().__init__()
        host_blocks = count_arg("host_blocks", host_blocks, 0, MAX_HOST_BLOCKS)
        block_bytes = count_arg("block_bytes", block_bytes, 1)
        self.host_blocks = host_blocks  # size of the fixed host pool, in blocks
        self.block_bytes = block_bytes  # bytes one whole-model block occupies
        self.bytes_swapped = 0  # bytes moved over PCIe, both directions
        self.swap_outs = 0
        self.swap_ins = 0
        self._host_free = list(range(host_blocks - 1, -1, -1))  # a stack; pop() gives 0 first
        self._pairs_out: list[tuple[int, int]] = []  # (gpu, host) awaiting swap_out
        self._pairs_in: list[tuple[int, int]] = []  # (host, gpu) awaiting swap_in

    @property
    def host_free(self) -> int:
        return len(self._host_free)

    def drain_swaps(self) -> tuple[list, list]:
        out, inn = self._pairs_out, self._pairs_in
        self._pairs_out, self._pairs_in = [], []
        return out, inn

    def preempt(self, manager, group: Group) -> str:
        tables = {s: manager.block_table(s) for s in group.seq_ids}
        distinct = list(dict.fromkeys(b for t in tables.values() for b in t if b != NULL_BLOCK))
        if len(distinct) > len(self._host_free):
            return super().preempt(manager, group)  # no host room: fall back to recompute
        host = {b: self._host_free.pop() for b in distinct}
        self._pairs_out += [(b, host[b]) for b in distinct]
        group.swapped = {s: ([host.get(b, NULL_BLOCK) for b in t], t.num_tokens)
                         for s, t in tables.items()}
        for s in group.seq_ids:
            manager.free_sequence(s)
        self.preemptions += 1
        self.swap_outs += 1
        self.bytes_swapped += len(distinct) * self.block_bytes
        return "swap"

    def blocks_to_swap_in(self, group: Group) -> int:
        return len({b for blocks, _ in group.swapped.values() for b in blocks if b != NULL_BLOCK})

    def swap_in(self, manager, group: Group) -> bool:
        """Bring a swapped group back if its blocks fit; False (and no change) if not."""
        need = self.blocks_to_swap_in(group)
        if need > manager.num_free_blocks:
            return False
        gpu = manager.restore_sequences(group.swapped)  # host block -> new GPU block
        self._pairs_in += list(gpu.items())
        self._host_free += list(gpu)
        group.swapped = {}
        self.swap_ins += 1
        self.bytes_swapped += need * self.block_bytes
        return True


def make_policy(name: str, *, host_blocks: int = 0, block_bytes: int = 1):
    """A preemption policy by name: "recompute" or "swap"."""
    if not isinstance(name, str):
        raise TypeError(f"preemption policy must be a str, got {type(name).__name__}")
    if name == "recompute":
        return RecomputePolicy()
    if name == "swap":
        return SwapPolicy(host_blocks, block_bytes)
    raise ValueError(f"preemption policy must be one of {PREEMPTION_POLICIES}, got {name!r}")
