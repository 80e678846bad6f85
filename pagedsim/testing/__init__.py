"""pagedsim.testing: the simulator as a Hypothesis oracle for YOUR block manager or kernel.

Point the kit at any block manager (`contract.py` lists the names it needs) or any
paged-attention function with `cuda_kernels.paged_attention`'s arrays and a scale:

    from pagedsim.testing import check_manager, check_attention, manager_machine
    check_manager(MyManager)              # raises NonConformance with a paste-able script
    check_attention(my_attention)         # the same for fn(query, kv_cache, tables, lens, scale)
    TestMine = manager_machine(MyManager).TestCase   # or run it as a pytest test

From the shell: `pagedsim conform my_file.py:MyManager [--attention my_file.py:fn]`; in
pytest, the `manager_machine` and `paged_cache` fixtures (plugin.py). The kit needs only
NumPy and Hypothesis. Guide: docs/testing-kit.md.
"""

from .attention import check_attention, compare
from .caches import CaseSpec, PagedCase, paged_caches, paged_case, reference_attention
from .contract import RAN_OUT, Hung, NonConformance
from .machine import ManagerConformance, manager_machine
from .run import Summary, check_manager
from .strategies import Op, PromptedRequest, operations, requests

__all__ = [
    "check_manager",
    "check_attention",
    "compare",
    "manager_machine",
    "ManagerConformance",
    "requests",
    "operations",
    "Op",
    "PromptedRequest",
    "paged_caches",
    "paged_case",
    "CaseSpec",
    "PagedCase",
    "reference_attention",
    "NonConformance",
    "Hung",
    "RAN_OUT",
    "Summary",
]
