"""Lesson 3.4's side-by-side run, against vLLM itself: its vLLM column is what vLLM does."""

from tests.vllm_oracle.sides import needs_vllm  # noqa: E402

needs_vllm()

from course.ch03_kv_block.lessons import l3_4  # noqa: E402
from tests.course.test_lesson_3_4_vllm_run import recorded  # noqa: E402


def test_the_lessons_vllm_column_is_vllms_free_queue():
    theirs, _ = recorded()
    assert l3_4._vllm_queues() == theirs == l3_4._ours_queues()
