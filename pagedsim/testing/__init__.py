"""pagedsim.testing: the simulator as a Hypothesis oracle for YOUR block manager or kernel.

    check_manager(MyManager)              # raises NonConformance with a paste-able script
    check_attention(my_attention)         # the same for fn(query, kv_cache, tables, lens, scale)
    TestMine = manager_machine(MyManager).TestCase   # or run it as a pytest test

Needs only NumPy and Hypothesis. Guide (the shell command, the pytest fixtures, what is
checked): docs/testing-kit.md.
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
