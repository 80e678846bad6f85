"""The attention half of pagedsim.testing: the reference, the cases, and check_attention
catching the classic paged-attention bugs (a correct function must pass)."""

import numpy as np
import pytest

from pagedsim.testing import (
    CaseSpec,
    NonConformance,
    check_attention,
    paged_case,
    reference_attention,
)
from pagedsim.testing.caches import POISON

FEW = dict(examples=60)


def correct(query, kv_cache, block_tables, context_lens, scale, kv_of=lambda h, group: h // group):
    """A plain NumPy paged attention in float32, as a student would write it."""
    num_seqs, num_heads, head_dim = query.shape
    num_kv_heads, block_size = kv_cache.shape[2], kv_cache.shape[3]
    out = np.empty(query.shape, np.float32)
    for s in range(num_seqs):
        n = int(context_lens[s])
        blocks = [block_tables[s][p // block_size] for p in range(n)]
        k = np.stack([kv_cache[b, 0, :, p % block_size] for p, b in enumerate(blocks)])
        v = np.stack([kv_cache[b, 1, :, p % block_size] for p, b in enumerate(blocks)])
        for h in range(num_heads):
            kv_head = kv_of(h, num_heads // num_kv_heads)
            scores = k[:, kv_head].astype(np.float32) @ query[s, h].astype(np.float32) * scale
            p = np.exp(scores - scores.max())
            out[s, h] = (p / p.sum()) @ v[:, kv_head].astype(np.float32)
    return out


def logical_blocks(query, kv_cache, block_tables, context_lens, scale):
    """Bug: reads logical block i as physical block i (ignores the table)."""
    identity = np.tile(np.arange(block_tables.shape[1], dtype=np.int32), (len(block_tables), 1))
    return correct(query, kv_cache, identity, context_lens, scale)


def one_token_short(query, kv_cache, block_tables, context_lens, scale):
    """Bug: attends to context_len - 1 tokens (at least one)."""
    return correct(query, kv_cache, block_tables, np.maximum(context_lens - 1, 1), scale)


def one_token_long(query, kv_cache, block_tables, context_lens, scale):
    """Bug: attends to context_len + 1 tokens, within the table's last block."""
    bs = kv_cache.shape[3]
    room = -(-context_lens // bs) * bs  # slots the table covers
    return correct(query, kv_cache, block_tables, np.minimum(context_lens + 1, room), scale)


def modulo_heads(query, kv_cache, block_tables, context_lens, scale):
    """Bug: query head h reads KV head h % H_kv instead of h // group."""
    num_kv_heads = kv_cache.shape[2]
    return correct(
        query, kv_cache, block_tables, context_lens, scale, kv_of=lambda h, group: h % num_kv_heads
    )


def missing_scale(query, kv_cache, block_tables, context_lens, scale):
    """Bug: forgets to multiply the scores by the scale."""
    return correct(query, kv_cache, block_tables, context_lens, 1.0)


def test_a_correct_numpy_attention_passes_on_fp16_and_fp32():
    summary = check_attention(correct, **FEW)
    assert summary.examples == 60


@pytest.mark.parametrize(
    "bug",
    [logical_blocks, one_token_short, one_token_long, modulo_heads, missing_scale],
    ids=lambda f: f.__name__,
)
def test_each_classic_attention_bug_is_caught_with_the_call_that_rebuilds_the_case(bug):
    with pytest.raises(NonConformance) as caught:
        check_attention(bug, **FEW)
    message = str(caught.value)
    case_line = next(line for line in message.splitlines() if "case = paged_case(" in line)
    case = eval(case_line.split(" = ", 1)[1], {"paged_case": paged_case, "CaseSpec": CaseSpec})
    assert not np.allclose(
        bug(*case.args), case.reference(), atol=case.tolerance, rtol=case.tolerance
    ), "the printed case must reproduce the failure"
    assert np.allclose(
        correct(*case.args), case.reference(), atol=case.tolerance, rtol=case.tolerance
    )


def test_a_case_is_scattered_and_poisons_every_slot_no_token_lives_in():
    case = paged_case(
        CaseSpec(
            context_lens=(5, 2),
            block_size=4,
            num_kv_heads=2,
            group=3,
            head_dim=5,
            spare_blocks=2,
            seed=7,
        )
    )
    assert case.query.shape == (2, 6, 5) and case.kv_cache.shape == (6, 2, 2, 4, 5)
    live = {
        (int(case.block_tables[s][p // 4]), p % 4) for s, n in enumerate([5, 2]) for p in range(n)
    }
    for b in range(6):
        for off in range(4):
            poisoned = (case.kv_cache[b, :, :, off] == POISON).all()
            assert poisoned != ((b, off) in live)
    assert paged_case(case.spec).kv_cache.tobytes() == case.kv_cache.tobytes()


def test_a_case_spec_is_one_pasteable_record_and_refuses_a_bad_case():
    spec = CaseSpec(context_lens=np.array([3, 9]), dtype="float16", seed=4)
    assert spec.context_lens == (3, 9) and isinstance(spec.context_lens[0], int)
    assert eval(repr(spec), {"CaseSpec": CaseSpec}) == spec
    case = paged_case(spec)
    assert repr(case) == f"paged_case({spec!r})" and case.spec is spec
    for bad in (dict(context_lens=(3, 0)), dict(context_lens=()), dict(dtype="int8")):
        with pytest.raises(ValueError, match="context lengths >= 1"):
            CaseSpec(**bad)


def test_the_kit_reference_agrees_with_the_kernels_reference():
    from cuda_kernels import ScoreMask, reference

    for seed in range(3):
        spec = CaseSpec(
            context_lens=(7, 1, 12),
            block_size=2,
            num_kv_heads=2,
            group=2,
            head_dim=3,
            dtype="float16",
            seed=seed,
        )
        case = paged_case(spec)
        np.testing.assert_allclose(
            reference_attention(*case.args),
            reference.paged_attention(*case.args[:4], ScoreMask(scale=case.scale)),
            rtol=1e-12,
            atol=1e-12,
        )


def test_a_function_that_writes_into_its_inputs_is_caught():
    def scribbles(query, kv_cache, block_tables, context_lens, scale):
        out = correct(query, kv_cache, block_tables, context_lens, scale)
        kv_cache[...] = 0
        return out

    with pytest.raises(NonConformance, match="changed one of its inputs"):
        check_attention(scribbles, examples=5)


@pytest.mark.kernels
def test_the_projects_own_decode_kernel_conforms_through_the_kit():
    import cuda_kernels  # the CUDA simulator without a GPU: keep the cases tiny

    def kernel(query, kv_cache, block_tables, context_lens, scale):
        mask = cuda_kernels.ScoreMask(scale=scale)  # the kit passes a plain scale
        return cuda_kernels.paged_attention(query, kv_cache, block_tables, context_lens, mask)

    summary = check_attention(
        kernel,
        examples=10,
        max_seqs=2,
        max_context=8,
        head_dims=(1, 3, 4),
        max_group=2,
    )
    assert summary.examples == 10
