"""What a family's parity test compares against: transformers' f32 logits for seeded random
prompts of several lengths, and its greedy continuation of one more prompt."""

from __future__ import annotations

import numpy as np
import torch


def prompt(vocab: int, length: int, seed: int = 1) -> list[int]:
    return torch.randint(2, vocab, (length,), generator=torch.Generator().manual_seed(seed)).tolist()


def reference_logits_and_greedy(reference, lengths: list[int], generate_prompt: int,
                                generate_tokens: int):
    """({length: (ids, logits [length, vocab])}, (prompt ids, greedy tokens)) from `reference`."""
    vocab = reference.config.get_text_config().vocab_size  # a wrapper holds the text model's
    logits: dict[int, tuple[list[int], np.ndarray]] = {}
    with torch.no_grad():
        for n in lengths:
            ids = prompt(vocab, n)
            logits[n] = (ids, reference(input_ids=torch.tensor([ids])).logits[0].float().numpy())
        ids = prompt(vocab, generate_prompt, seed=2)
        tokens = reference.generate(
            torch.tensor([ids]), do_sample=False, max_new_tokens=generate_tokens,
            attention_mask=torch.ones(1, len(ids), dtype=torch.long),
            eos_token_id=None)[0, len(ids):].tolist()
    assert len(tokens) == generate_tokens
    return logits, (ids, tokens)
