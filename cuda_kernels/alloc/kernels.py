"""Device kernels for a GPU-resident block pool: claim, share and free block ids concurrently.

The pool lives in three device arrays (see `pool.DevicePool`):

    free_ids  # [num_blocks] int32; free_ids[0:top] are the free block ids, popped from the end
    top       # [1] int32; how many ids are free
    ref       # [num_blocks] int32; owners of each block (0 = free)

Grid for every kernel: one thread per request (allocation) or per block-table entry
(incref/free); 1-D, with a bounds guard. Three ways to allocate:

- `alloc_cas`: each thread claims `counts[i]` ids off the top with a compare-and-swap
  loop; all or nothing, so a request that does not fit leaves the pool untouched.
- `alloc_atomic_add`: one `cuda.atomic.sub` per thread lowers top by `counts[i]` and
  returns the old top: the slice is [old-k, old). The launcher checked the batch fits.
- `alloc_racy`: a plain load and store of `top`; two threads that load the same top get
  the same ids. Kept for the lesson; `pagedsim race` proves it.

Memory ordering: allocation and free are separate launches on one stream (a kernel
boundary orders all global memory), so a pop never meets a push; pushes reserve distinct
slots with `atomic.add` on `top`. Pushing and popping at once would need a second counter
(reserve, commit after a `cuda.threadfence()`); an index-based CAS stack meets ABA.

Reference: CUDA C++ Programming Guide, "Atomic Functions"; vLLM v1 block_pool.py (the
host-side pool this mirrors); `pagedsim.labs.interleavings` for the step-by-step race.
"""

from numba import cuda


def alloc_cas(counts, free_ids, top, ref, out, granted):
    """Thread i: take counts[i] ids with a CAS loop on top[0], or none if they do not fit."""
    i = cuda.grid(1)
    if i >= counts.shape[0]:
        return
    k = counts[i]
    t = top[0]  # a first guess; the CAS below returns the true value when it is stale
    while True:
        if t < k:
            granted[i] = 0
            return
        old = cuda.atomic.cas(top, 0, t, t - k)
        if old == t:
            break
        t = old  # another thread moved top between our read and our CAS: retry from its value
    for j in range(k):  # ids [t-k, t) are ours alone now
        b = free_ids[t - k + j]
        out[i, j] = b
        ref[b] = 1
    granted[i] = 1


def alloc_atomic_add(counts, free_ids, top, ref, out, granted):
    """Thread i: one atomic fetch-and-subtract claims ids [old-k, old)."""
    i = cuda.grid(1)
    if i >= counts.shape[0]:
        return
    k = counts[i]
    old = cuda.atomic.sub(top, 0, k)  # returns the value before the subtraction
    for j in range(k):
        b = free_ids[old - k + j]
        out[i, j] = b
        ref[b] = 1
    granted[i] = 1


def alloc_racy(counts, free_ids, top, ref, out, granted):
    """Thread i: plain load, then plain store of top. WRONG under concurrency, on purpose."""
    i = cuda.grid(1)
    if i >= counts.shape[0]:
        return
    k = counts[i]
    t = top[0]  # two threads can both read the same t here ...
    for j in range(k):
        b = free_ids[t - k + j]
        out[i, j] = b
        ref[b] = 1
    top[0] = t - k  # ... and both write t-k: the same ids handed out twice
    granted[i] = 1


def incref_blocks(blocks, ref):
    """Thread i: one more owner for blocks[i] (a fork sharing its parent's blocks)."""
    i = cuda.grid(1)
    if i < blocks.shape[0]:
        cuda.atomic.add(ref, blocks[i], 1)


def free_blocks(blocks, free_ids, top, ref, released):
    """Thread i: drop one owner of blocks[i]; the thread that drops the last one pushes it."""
    i = cuda.grid(1)
    if i >= blocks.shape[0]:
        return
    b = blocks[i]
    old = cuda.atomic.sub(ref, b, 1)  # exactly one thread sees old == 1 for each block
    if old == 1:
        slot = cuda.atomic.add(top, 0, 1)  # reserve a slot no other pusher can get
        free_ids[slot] = b
        released[i] = 1
    else:
        released[i] = 0


alloc_cas_kernel = cuda.jit(alloc_cas)
alloc_atomic_add_kernel = cuda.jit(alloc_atomic_add)
alloc_racy_kernel = cuda.jit(alloc_racy)
incref_kernel = cuda.jit(incref_blocks)
free_kernel = cuda.jit(free_blocks)
