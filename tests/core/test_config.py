"""vLLM's config objects: a bad number is refused when the config is made, in one line."""

import pytest

from pagedsim.config import CacheConfig, SchedulerConfig


@pytest.mark.parametrize(
    "make, error, message",
    [
        (lambda: CacheConfig(block_size=0), ValueError, "block_size"),
        (lambda: CacheConfig(num_gpu_blocks_override=0), ValueError, "num_gpu_blocks_override"),
        (lambda: CacheConfig(enable_prefix_caching=1), TypeError, "enable_prefix_caching"),
        (lambda: SchedulerConfig(max_num_batched_tokens=0), ValueError, "max_num_batched_tokens"),
        (lambda: SchedulerConfig(preemption_mode="evict"), ValueError, "preemption_mode"),
    ],
)
def test_a_bad_setting_is_refused_naming_vllms_field(make, error, message):
    with pytest.raises(error, match=message):
        make()


def test_the_defaults_are_generates():
    assert CacheConfig() == CacheConfig(16, None, True)
    assert SchedulerConfig() == SchedulerConfig(64, "swap")
