"""Unicode normalizers (NFC, NFD, NFKC, NFKD) against HF `tokenizers`, which normalizes with
Unicode 9.0 data (the unicode-normalization-alignments crate): characters assigned since then
(combining marks such as U+1DF8, compositions such as U+11935 U+11930) are left as written there,
where a newer Unicode reorders or composes them. Each form runs on qwen3's tokenizer.json with its
NFC normalizer swapped, over the auditor's repros and a seeded sweep of bases followed by combining
marks from every Unicode version Python knows (9.0's and later ones mixed)."""

from __future__ import annotations

import json
import random
import subprocess
import unicodedata
from pathlib import Path

import pytest

from conftest import LATENT, REPO

QWEN3 = REPO.parent / "shared" / "tokenizers" / "qwen3"
REPROS = ["\u1df8\u302a", "\U00011935\U00011930", "a\u1df8\u0301", "e\u0301\u1df8",
          "\u0915\u093c\u0300\u1df8", "\U00011935\U00011930\u0301", "\u0b47\u0b3e\U00011935"]
# Bases that compose (Latin, Hangul, Devanagari, Oriya, Grantha, Dives Akuru), and compatibility
# characters for the K forms.
BASES = ["a", "e", "x", "\u0915", "\U00011935", "\u1100", "\uac00", "\u0627", "\u0b47",
         "\U00011347", "\ufb01", "\u2460", "\u00c5"]


def sweep(n: int) -> list[str]:
    marks = [cp for cp in range(0x300, 0x1F000) if unicodedata.combining(chr(cp))]
    # Marks and compositions Unicode added after 9.0 that the auditor found HF leaves alone.
    marks += [0x7FD, 0x898, 0x8CA, 0x1DF6, 0x1DF8, 0x1DFA, 0x10EFD, 0x11930, 0x11935, 0x1E4EC,
              0x16FF0, 0x11F41]
    rng = random.Random(20261207)
    return [rng.choice(BASES) + "".join(chr(rng.choice(marks)) for _ in range(rng.randint(1, 4)))
            for _ in range(n)]


def tokenizer_with(form: str, root: Path) -> Path:
    d = root / form
    d.mkdir()
    spec = json.loads((QWEN3 / "tokenizer.json").read_text(encoding="utf-8"))
    spec["normalizer"] = {"type": form}
    (d / "tokenizer.json").write_text(json.dumps(spec, ensure_ascii=False), encoding="utf-8")
    (d / "tokenizer_config.json").write_bytes((QWEN3 / "tokenizer_config.json").read_bytes())
    return d


@pytest.mark.parametrize("form", ["NFC", "NFD", "NFKC", "NFKD"])
def test_normalizers_use_unicode_9_data(form, tmp_path):
    from tokenizers import Tokenizer

    if not LATENT.exists():
        raise RuntimeError(f"{LATENT} is missing: build first")
    d = tokenizer_with(form, tmp_path)
    texts = REPROS + sweep(4000)
    want = [e.ids for e in Tokenizer.from_file(str(d / "tokenizer.json")).encode_batch(
        texts, add_special_tokens=False)]
    lines = tmp_path / "texts.jsonl"
    lines.write_text("".join(json.dumps({"text": t}) + "\n" for t in texts), encoding="utf-8")
    proc = subprocess.run([str(LATENT), "tokenize", "--tokenizer", str(d), "--no-special-tokens",
                           "--jsonl", str(lines)], capture_output=True)
    assert proc.returncode == 0, proc.stderr.decode(errors="replace")
    got = [json.loads(line)["ids"] for line in proc.stdout.decode().split("\n")[:-1]]
    assert len(got) == len(texts)
    bad = [i for i, (g, w) in enumerate(zip(got, want)) if g != w]
    assert not bad, (f"{len(bad)} of {len(texts)} differ; first {ascii(texts[bad[0]])}: "
                     f"latent {got[bad[0]]}, HF {want[bad[0]]}")
