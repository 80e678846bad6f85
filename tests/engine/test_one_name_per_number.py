"""One name per number (issue 41): the pool's size is `num_gpu_blocks` from the command line
to the pool, as vLLM v1 names it (`CacheConfig.num_gpu_blocks`, `BlockPool.num_gpu_blocks`),
with `num_gpu_blocks_override` only for the flag itself. Each test follows a number that
no default gives, layer by layer, and checks that no layer knows it by another name.
"""

import pytest

from pagedsim.app import play
from pagedsim.app.play_session import Refused, Session
from pagedsim.engine import generate, generate_cli
from pagedsim.io.trace_json import snapshot_to_dict

from .checkpoints import write_checkpoint

OLD = "num_blocks"  # the name the pool's size had in the core before issue 41


def _named_once(*layers: object, size: int) -> None:
    for layer in layers:
        name = type(layer).__name__
        assert layer.num_gpu_blocks == size, f"{name}.num_gpu_blocks"
        assert not hasattr(layer, OLD), f"{name} still has .{OLD}"


def test_generate_carries_num_gpu_blocks_from_the_flag_to_the_pool(tmp_path, monkeypatch):
    served = []
    real = generate.serve

    def spy(*args, **kwargs):
        served.append(real(*args, **kwargs))
        return served[-1]

    monkeypatch.setattr(generate, "serve", spy)
    model = write_checkpoint(tmp_path, vocab=40, layers=1, seed=3)
    argv = ["--model", str(model), "--prompt", "the cat", "--max-tokens", "2"]
    argv += ["--num-gpu-blocks-override", "11", "--preemption-mode", "recompute"]
    argv += ["--backend", "numpy", "--json"]  # v1: its scheduler keeps the engine's CacheConfig
    assert generate_cli.main(argv) == 0
    (llm, summary), engine = served[0], served[0][0].llm_engine
    assert engine.mode == "v1"
    assert llm.cache_config.num_gpu_blocks_override == 11  # the override, as vLLM keeps it
    assert engine.scheduler.cache_config.num_gpu_blocks == 11  # then the pool's size, sized
    _named_once(engine.manager, engine.manager.pool, size=11)
    assert summary["num_gpu_blocks"] == 11
    assert len(engine.caches[0]) == 11  # the kernels' cache: its leading dimension


@pytest.mark.parametrize(
    "flags",
    [
        [],
        ["--enable-prefix-caching"],
        ["--sliding-window", "8"],
        ["--hybrid", "--sliding-window", "8"],
    ],
    ids=["plain", "prefix-caching", "sliding-window", "hybrid"],
)
def test_play_carries_num_gpu_blocks_from_the_flag_to_the_pool(flags):
    args = play.parser().parse_args(["--num-gpu-blocks-override", "13", *flags])
    assert args.num_gpu_blocks_override == 13
    options = play.options(args)
    session = Session(options)
    _named_once(options, session.manager, session.manager.pool, size=13)
    step0 = session.snapshots[0]
    _named_once(step0, size=13)
    saved = snapshot_to_dict(step0)
    assert saved["num_gpu_blocks"] == 13 and OLD not in saved  # the trace JSON's key


@pytest.mark.parametrize(
    "old, new",
    [
        (["--window", "8"], ["--sliding-window", "8"]),
        (["--hybrid", "8"], ["--hybrid", "--sliding-window", "8"]),
        (["--hybrid", "--window", "8"], ["--hybrid", "--sliding-window", "8"]),
        (["--hybrid", "8", "--sliding-window", "8"], ["--hybrid", "--sliding-window", "8"]),
    ],
)
def test_plays_earlier_window_spellings_ask_for_the_same_pool(old, new):
    """`--window N` and `--hybrid N` still parse: the window goes on as sliding_window."""
    assert play.options(play.parser().parse_args(old)) == play.options(
        play.parser().parse_args(new)
    )


def test_play_refuses_two_different_windows():
    args = play.parser().parse_args(["--hybrid", "8", "--sliding-window", "4"])
    with pytest.raises(Refused, match="two windows"):
        play.options(args)


def test_the_v0_engines_scheduler_holds_the_pool_it_schedules():
    """SchedulerV0 gets the engine's CacheConfig: num_gpu_blocks and the sized swap space."""
    from pagedsim.config import CacheConfig
    from pagedsim.engine.model import TinyModel
    from pagedsim.engine.paged import PagedEngine

    engine = PagedEngine(TinyModel(), CacheConfig(block_size=4, num_gpu_blocks=9), mode="v0")
    held = engine.scheduler.cache_config
    assert (held.num_gpu_blocks, held.block_size) == (9, 4)
    assert held.num_cpu_blocks == len(engine.hosts[0]) == 36  # 4 x num_gpu_blocks by default
    assert engine.scheduler.manager.num_gpu_blocks == 9
