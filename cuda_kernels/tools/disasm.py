"""Static figures read from a kernel's PTX and SASS, and an occupancy estimate. No GPU.

PTX (the `numba.cuda.compile_ptx` text):
    global_load_bits   widest global load: `ld.global[.nc].v4.u32` is 4 x 32 = 128 bits,
                       `cp.async ... 16` is 128 bits
    shuffles           count of `shfl.sync` instructions
    barriers           count of `bar.sync` / `barrier.sync` instructions

SASS (ptxas -> cubin -> `nvdisasm -c`, or `cuobjdump -sass` where nvdisasm is absent):
the steady-state loop is found from the control flow alone, so it holds for any kernel.
  1. every backward branch `BRA target` with target address <= its own address closes a
     loop [target, branch] (ptxas lays out natural loops contiguously);
  2. the K/V loads are the global loads (`LDG`, `LDGSTS`) inside loops of the K/V width:
     `kv_bits` when the caller gives it, else the widest width found inside loops if it is
     above 32 bits (a vectorised kernel: 128), else the narrowest below 32 (a scalar fp16
     kernel: 16), else 32. Block-table and length reads are 32-bit, so they are never
     taken for K/V except in a scalar fp32 kernel, where they cannot be told apart;
  3. the steady-state loop is the loop holding the most K/V loads; ties go to the smallest
     (innermost) one, so an outer loop wins only when it holds K/V loads of its own, e.g.
     K and V read in two sibling inner loops of the tile loop.
  loop_sass          instructions in that loop, NOPs excluded (static: a nested loop's body
                     counts once; `loop_inner_loops` says how many there are)
  sass_per_kv_byte   loop_sass / K/V bytes one warp loads per trip (32 lanes x width / 8 per
                     K/V load, all lanes assumed active). Unrolling scales both, so it cancels.
  loop_kv_bytes      those K/V bytes per trip (per warp)
  hmma, hgmma, ldsm, ldgsts   tensor-core mma (HMMA.*, and Hopper's warpgroup HGMMA.*),
                     ldmatrix (LDSM.*) and cp.async (LDGSTS.*) instructions in that loop
  loop_flops         floating-point operations one warp's trip performs: HMMA.16816 does
                     2 x 16 x 8 x 16 = 4,096 (HMMA.1688: 2,048), HGMMA.64xNx16 2 x 64 x N x 16
                     / 4 (one warpgroup-wide MMA, issued by each of its 4 warps),
                     FFMA/HFMA2 2 and 4 per lane, FADD/FMUL/FMNMX 1 per lane (x 32 lanes);
                     MUFU, conversions and integer work count 0; tensor_flops: HMMA/HGMMA's
  loop_sass_per_hmma loop_sass / hmma (None without HMMA); flops_per_loop_sass loop_flops /
                     loop_sass (what one issue slot buys)

Occupancy (`occupancy`): resident CTAs per SM from the per-SM limits below, the way the
CUDA occupancy calculator does it: registers are allocated per warp in units of 256 (regs
per thread rounded up to 8), shared memory per CTA in units of 128 bytes plus 1 KiB the
runtime reserves per CTA (sm_80 and later), the largest shared-memory carve-out assumed.
Sources: CUDA C++ Programming Guide, "Compute Capabilities" table; the Ampere and Hopper
tuning guides (164 KiB / 228 KiB shared memory per SM).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# Per-SM limits: max warps, max CTAs, 32-bit registers, shared bytes (max carve-out).
SM_LIMITS = {
    "sm_80": {"warps": 64, "ctas": 32, "registers": 65536, "shared": 164 * 1024},
    "sm_90": {"warps": 64, "ctas": 32, "registers": 65536, "shared": 228 * 1024},
}
RESERVED_SHARED = 1024  # bytes per CTA, sm_80+
WARP = 32

_PTX_LOAD = re.compile(r"^\s*(?:@!?%\w+\s+)?ld\.global((?:\.\w+)+)", re.M)
_PTX_CP_ASYNC = re.compile(
    r"^\s*(?:@!?%\w+\s+)?cp\.async\.\S*global\S*\s+[^;]*,\s*(\d+)\s*[,;]", re.M
)
_PTX_SHFL = re.compile(r"^\s*(?:@!?%\w+\s+)?shfl\.sync\b", re.M)
_PTX_BAR = re.compile(r"^\s*(?:@!?%\w+\s+)?(?:bar|barrier)\.sync\b", re.M)


def _ptx_bits(suffixes: str) -> int:
    parts = suffixes.strip(".").split(".")
    lanes = next((int(p[1:]) for p in parts if re.fullmatch(r"v[248]", p)), 1)
    width = next(
        (int(m.group(1)) for p in reversed(parts) if (m := re.fullmatch(r"[a-z]+(\d+)", p))), 0
    )
    return lanes * width


def ptx_stats(ptx: str) -> dict:
    """{'global_load_bits', 'shuffles', 'barriers'} of one PTX module."""
    bits = [_ptx_bits(m.group(1)) for m in _PTX_LOAD.finditer(ptx)]
    bits += [8 * int(m.group(1)) for m in _PTX_CP_ASYNC.finditer(ptx)]
    return {
        "global_load_bits": max(bits, default=0),
        "shuffles": len(_PTX_SHFL.findall(ptx)),
        "barriers": len(_PTX_BAR.findall(ptx)),
    }


@dataclass(frozen=True)
class Instr:
    addr: int
    opcode: str  # e.g. "LDG.E.128", "BRA", predicate stripped
    text: str
    target: int | None = None  # branch target address, when this is a branch

    @property
    def load_bits(self) -> int:
        """Width of a global load (LDG / LDGSTS) in bits; 0 for anything else."""
        head, *mods = self.opcode.split(".")
        if head not in ("LDG", "LDGSTS"):
            return 0
        for mod, bits in (("128", 128), ("64", 64), ("U16", 16), ("S16", 16), ("U8", 8), ("S8", 8)):
            if mod in mods:
                return bits
        return 32


_SASS_LINE = re.compile(r"/\*([0-9a-f]{4,})\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Za-z0-9_.]*)([^;]*);")
_LABEL = re.compile(r"^\s*(\.L\w+|\$\S+):\s*$")
_TARGET = re.compile(r"`\((\.L\w+)\)|\b(0x[0-9a-f]+)\b")


def parse_sass(text: str) -> list[Instr]:
    """Instructions of an `nvdisasm -c` or `cuobjdump -sass` listing, in address order."""
    labels, raw, pending = {}, [], []
    for line in text.splitlines():
        label = _LABEL.match(line)
        if label:
            pending.append(label.group(1))
            continue
        m = _SASS_LINE.search(line)
        if not m:
            continue
        addr = int(m.group(1), 16)
        for name in pending:
            labels[name] = addr
        pending = []
        raw.append((addr, m.group(2), m.group(0)))
    out = []
    for addr, opcode, txt in raw:
        target = None
        if opcode.split(".")[0] in ("BRA", "BRX", "JMP"):
            t = _TARGET.search(txt[txt.index(opcode) + len(opcode) :])
            if t:
                target = labels.get(t.group(1)) if t.group(1) else int(t.group(2), 16)
        out.append(Instr(addr, opcode, txt, target))
    return out


def loops(instrs: list[Instr]) -> list[tuple[int, int]]:
    """(first, last) instruction indices of every loop closed by a backward branch."""
    index = {ins.addr: i for i, ins in enumerate(instrs)}
    found = set()
    for i, ins in enumerate(instrs):
        if ins.target is not None and ins.target <= ins.addr and ins.target in index:
            found.add((index[ins.target], i))
    return sorted(found)


_HGMMA = re.compile(r"HGMMA\.64x(\d+)x16")
_LANE_FLOPS = {"FFMA": 2, "HFMA2": 4, "FADD": 1, "FMUL": 1, "FMNMX": 1}


def instr_flops(opcode: str) -> int:
    """Floating-point operations of one warp-wide instruction (module docstring)."""
    head = opcode.split(".")[0]
    if head == "HMMA":
        return 2048 if ".1688" in opcode else 4096 if ".16816" in opcode else 0
    if head == "HGMMA":
        m = _HGMMA.match(opcode)
        return 2 * 64 * int(m.group(1)) * 16 // 4 if m else 0  # each of the 4 warps issues it
    return WARP * _LANE_FLOPS.get(head, 0)


STEADY_KEYS = (  # steady_loop's figures, in order
    "loop_sass loop_kv_loads loop_kv_bits loop_inner_loops sass_per_kv_byte loop_kv_bytes hmma "
    "hgmma ldsm ldgsts loop_flops tensor_flops loop_sass_per_hmma flops_per_loop_sass"
).split()


def steady_loop(instrs: list[Instr], kv_bits: int | None = None) -> dict:
    """The steady-state loop's figures (see the module docstring); None values if no loop loads."""
    spans = loops(instrs)
    in_loop = {k for a, b in spans for k in range(a, b + 1)}
    widths = [instrs[k].load_bits for k in in_loop if instrs[k].load_bits]
    empty = dict.fromkeys(STEADY_KEYS)
    empty["loop_kv_loads"] = 0
    if not widths:
        return empty
    bits = kv_bits or (max(widths) if max(widths) > 32 else min(widths))

    def kv_loads(a, b):
        return [k for k in range(a, b + 1) if instrs[k].load_bits == bits]

    ranked = [(len(kv_loads(a, b)), -(b - a), a, b) for a, b in spans]
    count, _, a, b = max(ranked)
    if count == 0:
        return empty
    heads = [instrs[k].opcode.split(".")[0] for k in range(a, b + 1)]
    flops = [instr_flops(instrs[k].opcode) for k in range(a, b + 1)]
    sass = sum(1 for head in heads if head != "NOP")
    kv_bytes = count * WARP * bits // 8
    hmma = heads.count("HMMA")
    return {
        "loop_sass": sass,
        "loop_kv_loads": count,
        "loop_kv_bits": bits,
        "loop_inner_loops": sum(1 for c, d in spans if a <= c and d <= b and (c, d) != (a, b)),
        "sass_per_kv_byte": round(sass / kv_bytes, 4),
        "loop_kv_bytes": kv_bytes,
        "hmma": hmma,  # tensor-core, ldmatrix and cp.async instructions in the loop
        "hgmma": heads.count("HGMMA"),
        "ldsm": heads.count("LDSM"),
        "ldgsts": heads.count("LDGSTS"),
        "loop_flops": sum(flops),
        "tensor_flops": sum(f for f, h in zip(flops, heads, strict=True) if h in ("HMMA", "HGMMA")),
        "loop_sass_per_hmma": round(sass / hmma, 2) if hmma else None,
        "flops_per_loop_sass": round(sum(flops) / sass, 2),
    }


def occupancy(arch: str, registers: int, shared_bytes: int, threads: int) -> dict:
    """{'ctas_per_sm', 'warps_per_sm', 'limited_by'} for a CTA of `threads` threads."""
    lim = SM_LIMITS[arch]
    warps = -(-threads // WARP)
    regs_per_warp = -(-max(registers, 1) // 8) * 8 * WARP  # a multiple of 256
    by = {
        "warps": lim["warps"] // warps,
        "ctas": lim["ctas"],
        "registers": (lim["registers"] // regs_per_warp) // warps,
    }
    smem = -(-(shared_bytes + RESERVED_SHARED) // 128) * 128
    by["shared"] = lim["shared"] // smem
    ctas = min(by.values())
    return {
        "ctas_per_sm": ctas,
        "warps_per_sm": ctas * warps,
        "limited_by": min(by, key=lambda k: (by[k], k)),
    }
