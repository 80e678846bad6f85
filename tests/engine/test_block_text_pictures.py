"""Each block in `generate`'s pictures is labelled with the text it holds: the engine
records it (block_tokens), the frames carry it (LabelledSnapshot.block_labels), and the
renderer draws it as an artist of its own."""

import matplotlib

matplotlib.use("Agg")

from pagedsim.draw.render import block_label, render  # noqa: E402
from pagedsim.engine.generate import Workload, load, serve, step_frames  # noqa: E402


def test_the_frames_label_every_live_block_with_the_16_characters_it_holds():
    model, tok = load()
    llm, summary = serve(
        model, tok, Workload(["ROMEO.\nBut soft, what light"], 12), backend="numpy"
    )
    engine, marks = llm.llm_engine, llm.steps
    frames = step_frames(engine, marks)
    first = frames[0]
    (seq,) = first.sequences
    assert [first.block_labels[b] for b in seq.blocks] == ["ROMEO.\nBut soft,", " what light"]
    last = [f for f in frames if f.sequences][-1]  # the last step the sequence was live
    (seq,) = last.sequences
    # 27 prompt characters + 10 of the 12 generated: the 11th is computed in the last step,
    # which also frees the sequence, and the 12th is only sampled
    assert len(seq.blocks) == 3 and seq.num_tokens == 27 + 10
    (served,) = summary["requests"]
    held = [*served["prompt_token_ids"], *served["outputs"][0]["token_ids"]][: seq.num_tokens]
    assert "".join(last.block_labels[b] for b in seq.blocks) == tok.decode(held)
    assert frames[-1].sequences == () and last.block_labels[seq.blocks[0]] == "ROMEO.\nBut soft,"


def test_the_renderer_draws_a_blocks_text_and_leaves_unlabelled_snapshots_alone():
    model, tok = load()
    llm, _ = serve(model, tok, Workload(["ROMEO.\nBut soft, what light"], 2), backend="numpy")
    engine, marks = llm.llm_engine, llm.steps
    frame = step_frames(engine, marks)[0]
    fig = render(frame)
    texts = {t.get_gid(): t.get_text() for ax in fig.axes for t in ax.texts if t.get_gid()}
    b = frame.sequences[0].blocks[0]
    assert texts[f"text-{b}"] == block_label(frame, b) == "ROMEO.\u21b5B\nut soft,"
    plain = engine.manager.trace.snapshots[marks[0].snapshot]  # the manager's own snapshot
    fig = render(plain)
    assert not any((t.get_gid() or "").startswith("text-") for ax in fig.axes for t in ax.texts)
