"""Under --lang zh, 3.4b's model-comparison messages (the kit's, English only) read in Chinese.

One sample per sentence template of pagedsim/testing/machine.py, written as the kit writes
it; after translation only calls, identifiers and numbers may stay in Latin letters.
"""

import re

import pytest

from course.ch03_kv_block.checks._kit_zh import in_chinese

SAMPLES = [
    "after m.free_sequence(0), num_free_blocks is 0 but the model has 1 free: this call left the "
    "free count as it was; the model gave back 1 block(s) (a leak: free must release every block "
    "whose count drops to 0)",
    "after m.append_tokens(0, 1), num_free_blocks is 1 but the model has 0 free: this call left "
    "the free count as it was; the model took 1 block(s), 1 of them for copy-on-write (too few: "
    "ceil(tokens / block_size) blocks, plus a copy when appending into a shared, partly filled "
    "last block)",
    "after m.fork(0, 1), num_free_blocks is 2 but the model has 3 free: this call took 1 block(s); "
    "the model left the free count as it was (fork shares the parent's blocks; it needs no new "
    "ones)",
    "after m.add_sequence(0, 5), tables hold 2 distinct block(s) and 3 are free, but the pool has "
    "6",
    "after m.free_sequence(1), block_table(0) is [0, 2]; with vllm free order the model gives [0, "
    "1]",
    "block_table(0) has 3 entries for 5 tokens; expected ceil(5/4) = 2",
    "block_table(1) is [0, 0]: ids must be distinct, in 0..5",
    "after m.append_tokens(1, 1), seq 1 does not read back its own tokens: position 4 lives in "
    "block 1 (slot 6), and it holds the token seq 0 wrote at position 6; block 1 is also in the "
    "table of seq [0]",
    "after m.append_tokens(0, 1), seq 0 does not read back its own tokens: position 0 lives in "
    "block 1 (slot 2), and nothing was ever written there (or it was never copied)",
    "m.append_tokens(0, 1) succeeded, but it needs 1 free block(s) and only 0 are free: it must "
    "raise OutOfBlocks or MemoryError (the model does). In the model its last block is partly full "
    "and shared with seq [1] (fork counted the child's reference), so writing into it needs a "
    "private copy first (copy-on-write)",
    "m.add_sequence(2, 9) ran out of blocks, as it should, but changed the state (all-or-nothing "
    "broken): num_free_blocks went 3 -> 1",
    "m.add_sequence(2, 3) raised OutOfBlocks: need 1, have 0, but the call needs 1 block(s) and 2 "
    "are free (the model succeeds)",
    "after every sequence is freed, num_free_blocks is 4 of 6: 2 block(s) leaked",
    "m.fork(0, 1) did not return within 5 s (an infinite loop?)",
    "m.fork(0, 1) raised KeyError: 3",
]
KEPT = (
    r"m\.\w+\([^)]*\)|block_table|num_free_blocks|OutOfBlocks|MemoryError|KeyError|copy-on-write|ceil"
    r"|tokens?|block_size|slot|fork|free|need|have|vllm"
)


@pytest.mark.parametrize("english", SAMPLES)
def test_every_kit_sentence_has_a_chinese_template(english):
    zh = in_chinese(english)
    assert not zh.startswith("与模型不一致"), f"no template matches: {english}"
    words = re.findall(r"[A-Za-z]{3,}", re.sub(KEPT, "", zh))
    assert not words, f"English left in {zh!r}: {words}"
