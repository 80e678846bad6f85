"""Every prose list of a registry's names matches the registry: the preemption policies
(PREEMPTION) and the prefix cache's eviction policies (EVICTION_KEYS).

Each row names a file, a pattern whose groups hold a list of names, and the registry it
must match. A new policy added to a registry but not to one of these texts (or a text
naming a policy that does not exist) fails here, with the file named."""

import re
from pathlib import Path

import pytest

from pagedsim.app import play, play_session
from pagedsim.engine import generate_cli
from pagedsim.policies import EVICTION_KEYS, PREEMPTION, PREEMPTION_POLICIES

ROOT = Path(__file__).resolve().parents[2]
PREEMPT, EVICT = set(PREEMPTION), set(EVICTION_KEYS)

ROWS = [  # (path, pattern, registry)
    ("docs/commands.md", r"preemption \(([a-z, ]+)\)", PREEMPT),
    ("docs/commands.md", r"v0 (\w+) and (\w+) beside it", PREEMPT),
    ("pagedsim/app/play_session.py", r"by --preemption-mode: (\w+), or (\w+) to the host", PREEMPT),
    ("pagedsim/app/play.py", r"`--preemption-mode ([a-z|]+)`", PREEMPT),
    ("pagedsim/app/play.py", r"none \(the step fails\), (\w+) or (\w+) the newest", PREEMPT),
    ("pagedsim/labs/__init__.py", r" x ([a-z/]+) on one trace", PREEMPT),
    ("pagedsim/labs/policies.py", r"v0: ([a-z| ]+) \(policies/preemption.py\)", PREEMPT),
    ("pagedsim/policies/__init__.py", r"make_policy\(([^,]+), \.\.\.\)", PREEMPT),
    ("pagedsim/engine/__init__.py", r"preemption by (\w+) or (\w+)", PREEMPT),
    ("docs/commands.md", r"policies.+?, ([a-z /]+) cache eviction", EVICT),
    ("pagedsim/policies/__init__.py", r"prefix caching; ([a-z /]+) eviction", EVICT),
    ("pagedsim/policies/__init__.py", r'eviction=("[^)]+)\)', EVICT),
    ("pagedsim/labs/__init__.py", r"policies\.py +([a-z/]+) x", EVICT),
    ("pagedsim/labs/policies.py", r"cached-block eviction +(.+?) +\(policies/cache_pool", EVICT),
    ("docs/vllm-name-map.md", r'`"(\w+)"` is v1\'s queue order, `(\w+)`/`(\w+)` are ours', EVICT),
]


def names_in(text: str, pattern: str) -> set:
    match = re.search(pattern, text, re.S)
    assert match, f"the list {pattern!r} is gone"
    words = " ".join(match.groups())
    words = re.sub(r"\([^)]*\)", " ", words)  # "lru (v1's order)" -> "lru"
    return set(re.findall(r"[a-z]+", words)) - {"or", "and"}


@pytest.mark.parametrize(
    "path, pattern, registry", ROWS, ids=[f"{p}:{i}" for i, (p, _, _) in enumerate(ROWS)]
)
def test_every_prose_list_of_policy_names_matches_its_registry(path, pattern, registry):
    assert names_in((ROOT / path).read_text(encoding="utf-8"), pattern) == registry


def _block(text: str, start: str, end: str) -> str:
    return text[text.index(start) : text.index(end)]


def test_the_registries_own_docstring_tables_name_every_entry():
    from pagedsim.policies import cache_pool, preemption

    table = _block(preemption.__doc__, "to a policy:", "The (gpu, host)")
    assert set(re.findall(r"^    ([a-z]+)  +\S", table, re.M)) == PREEMPT
    table = _block(cache_pool.__doc__, "smallest key goes first", "How to add one")
    assert set(re.findall(r"^    ([a-z]+) +the one", table, re.M)) == EVICT


def test_the_command_lines_take_their_choices_from_the_registry():
    assert play_session.POLICIES == ("none",) + PREEMPTION_POLICIES
    assert "choices=PREEMPTION_POLICIES" in Path(generate_cli.__file__).read_text(encoding="utf-8")
    assert "choices=POLICIES" in Path(play.__file__).read_text(encoding="utf-8")


def test_a_new_preemption_policy_is_one_registry_entry(monkeypatch):
    from pagedsim.policies import RecomputePolicy, make_policy, preemption

    class Drop(RecomputePolicy):  # a policy a newcomer adds: recompute under another name
        name = "drop"

    monkeypatch.setitem(preemption.PREEMPTION, "drop", Drop)
    assert isinstance(make_policy("drop"), Drop)
    from pagedsim import KVCacheManager
    from pagedsim.scheduler import make_scheduler
    from pagedsim.workloads import Request

    s = make_scheduler([Request(4, 6), Request(4, 6)], KVCacheManager(8, 2), "drop", watermark=0.0)
    s.run(check=True)
    assert s.preemptions > 0 and s.finished == 2
