"""Every bool flag of the simulator and the engine refuses a value that is not a bool, by
name, through one check (pagedsim.errors.bool_arg): 1, "yes", None or a NumPy bool is
never taken for True, and a refused call changes nothing."""

import numpy as np
import pytest
from helpers import manager_state
from hypothesis import given
from hypothesis import strategies as st

from pagedsim import KVCacheManager
from pagedsim.config import CacheConfig
from pagedsim.errors import bool_arg
from pagedsim.policies.cache_pool import CachingBlockPool
from pagedsim.policies.hybrid import HybridManager
from pagedsim.policies.prefix_cache import PrefixCachingManager

NOT_BOOLS = st.one_of(
    st.integers(),
    st.floats(allow_nan=False),
    st.text(max_size=3),
    st.none(),
    st.sampled_from([np.bool_(True), np.bool_(False), [], (True,)]),
)


@given(st.booleans())
def test_a_bool_is_returned_as_it_is(flag):
    assert bool_arg("flag", flag) is flag


@given(NOT_BOOLS)
def test_anything_else_is_a_type_error_naming_the_flag_and_the_type(value):
    with pytest.raises(TypeError, match=rf"^flag must be a bool, got {type(value).__name__}$"):
        bool_arg("flag", value)


@given(NOT_BOOLS)
def test_constructors_refuse_a_flag_that_is_not_a_bool(value):
    for name, make in (
        ("trace", lambda v: KVCacheManager(4, 2, trace=v)),
        ("snapshots", lambda v: KVCacheManager(4, 2, snapshots=v)),
        ("trace", lambda v: HybridManager(4, 2, sliding_window=2, trace=v)),
        ("enable_prefix_caching", lambda v: CacheConfig(enable_prefix_caching=v)),
        ("enable_kv_cache_events", lambda v: CachingBlockPool(4, 2, enable_kv_cache_events=v)),
    ):
        with pytest.raises(TypeError, match=f"{name} must be a bool"):
            make(value)


@given(NOT_BOOLS)
def test_a_refused_with_slots_leaves_the_manager_as_it_was(value):
    for m in (KVCacheManager(8, 2), PrefixCachingManager(8, 2)):
        m.add_sequence("a", 3)
        before = manager_state(m).without_history()
        with pytest.raises(TypeError, match="with_slots must be a bool"):
            m.add_sequence("b", 3, with_slots=value)
        assert manager_state(m).without_history() == before
