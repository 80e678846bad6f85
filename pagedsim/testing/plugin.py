"""The kit as a pytest plugin (the `pytest11` entry point in pyproject.toml): the
`manager_machine` and `paged_cache` fixtures, used as docs/testing-kit.md shows.

Importing this module imports only pytest: the kit loads when a fixture is used.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from typing_extensions import Unpack

    from .caches import PagedCase
    from .machine import MachineOptions, ManagerConformance
    from .run import CheckOptions, Summary

Factory = Callable[[int, int], object]  # factory(num_gpu_blocks, block_size) -> a manager


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "paged_cache(**fields): pagedsim.testing.CaseSpec fields "
        "(context_lens, block_size, num_kv_heads, group, head_dim, dtype, ...)",
    )


class _ManagerRunner:
    def __call__(self, factory: Factory, **kw: Unpack[CheckOptions]) -> Summary:
        from .run import check_manager

        return check_manager(factory, **kw)

    @staticmethod
    def machine(factory: Factory, **kw: Unpack[MachineOptions]) -> type[ManagerConformance]:
        from .machine import manager_machine

        return manager_machine(factory, **kw)


@pytest.fixture
def manager_machine() -> _ManagerRunner:
    """Call with your factory(num_gpu_blocks, block_size): checks it against KVCacheManager."""
    return _ManagerRunner()


@pytest.fixture
def paged_cache(request: pytest.FixtureRequest) -> PagedCase:
    """A scattered, poisoned paged KV cache (a PagedCase), fixed per test id."""
    from .caches import CaseSpec, paged_case

    marker = request.node.get_closest_marker("paged_cache")
    # CaseSpec's fields; a marker's values are whatever the test wrote (untyped)
    fields: dict[str, Any] = dict(
        context_lens=(5, 9, 2), block_size=4, num_kv_heads=2, group=2, head_dim=8
    )
    fields.update(marker.kwargs if marker else {})
    fields.setdefault("seed", zlib.crc32(request.node.nodeid.encode()) % 2**16)
    return paged_case(CaseSpec(**fields))
