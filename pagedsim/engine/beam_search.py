"""One step of beam search with stop tokens, as Hugging Face transformers' `generate` does it.

The engine follows transformers 5.x `GenerationMixin._beam_search` (do_sample=False,
early_stopping=False), the oracle of tests/engine/test_hf_transformers_oracle.py. One
step, for W beams and S stop tokens:

  * every (beam, token) scores beam log-prob + log_softmax(the beam's logits)[token]; the
    K = max(2, 1 + S) * W best are the candidates, best first (ties: lowest beam, then
    lowest token id);
  * a candidate whose token is a stop token, or the request's last (max_tokens), stops;
    ranked among the first W it becomes a finished hypothesis, scored log-prob /
    generated_len ** length_penalty (the stop token counted); the W best are kept;
  * the first W candidates that do not stop are the next step's beams;
  * the search ends early when W hypotheses are finished and the best beam's score is no
    better than the worst of them. The output is the hypotheses, best first.

vLLM v1's `LLM.beam_search` (vllm/beam_search.py) differs: no early stop, and it divides
by len(prompt + output). The storage side is v0's: surviving beams fork and append.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

# a finished hypothesis: (score, (step, rank) as the tie-break order, all its tokens)
Hypothesis = tuple[float, tuple[int, int], list[int]]


def num_candidates(beam_width: int, stop_token_ids: Sequence[int]) -> int:
    """K: enough candidates that W of them survive even when the best ones all stop."""
    return max(2, 1 + len(set(stop_token_ids))) * beam_width


def top_candidates(
    scores: Sequence[float], logprobs: Sequence[npt.NDArray[np.float64]], k: int
) -> list[tuple[int, int, float]]:
    """The k best (beam index, token, cumulative log-prob), best first.

    scores[b] is beam b's cumulative log-probability, logprobs[b] its [V] log_softmax."""
    cand = np.stack([s + lp for s, lp in zip(scores, logprobs, strict=True)])  # [beams, V]
    flat = cand.ravel()
    order = np.lexsort((np.arange(flat.size), -flat))[:k]
    vocab = cand.shape[1]
    return [(int(i // vocab), int(i % vocab), float(flat[i])) for i in order]


def hypothesis_score(logprob: float, generated_len: int, length_penalty: float) -> float:
    """transformers' finished-beam score: the log-prob divided by length ** length_penalty."""
    return float(logprob / generated_len**length_penalty)


def keep_best(hypotheses: list[Hypothesis], width: int) -> list[Hypothesis]:
    """The `width` best (score, order, tokens), best first; ties keep the earlier one."""
    return sorted(hypotheses, key=lambda h: (-h[0], h[1]))[:width]


def cannot_improve(hypotheses: list[Hypothesis], width: int, best_running: float) -> bool:
    """transformers' early_stopping=False heuristic: W are finished and the best running
    beam (already divided by its length ** length_penalty) beats none of them."""
    return len(hypotheses) == width and best_running <= min(h[0] for h in hypotheses)
