"""latent's tokenizer against HF `tokenizers` on the real tokenizers in ../shared/tokenizers
(deepseek_v3, qwen3, llama2): encode ids with and without special tokens, decode text with and
without skip_special_tokens, and streaming detokenization token by token, over a seeded corpus of
3,000+ strings (tokenizer_corpus.py) plus random id sequences for decoding.

The reference is the HF `tokenizers` pipeline that transformers 5's AutoTokenizer runs
(`backend_tokenizer`). For deepseek_v3 and qwen3 that is tokenizer.json as written (transformers 5
ignores tokenizer_config's add_bos_token when tokenizer.json exists; DeepSeek V3 therefore gets no
BOS). For llama2, transformers 5's LlamaTokenizer rebuilds the pipeline (a Metaspace pre-tokenizer
instead of the file's Prepend/Replace normalizers), which differs from tokenizer.json as written on
leading spaces and text after special tokens; latent applies the same rebuild
(src/tokenizer/transformers_class.cc), since users compare with AutoTokenizer."""

from __future__ import annotations

import codecs
import json
import os
import random
import re
import subprocess
from pathlib import Path

import pytest

from conftest import LATENT as BUILT_LATENT
from conftest import REPO
from tokenizer_corpus import corpus

# LATENT_BIN runs another build of latent (e.g. a sanitizer build) against the same checks.
LATENT = Path(os.environ.get("LATENT_BIN", BUILT_LATENT))
TOKENIZERS_DIR = Path(os.environ.get("LATENT_TOKENIZERS_DIR", REPO.parent / "shared" / "tokenizers"))
NAMES = ["deepseek_v3", "qwen3", "llama2"]


def tokenizer_dir(name: str) -> Path:
    d = TOKENIZERS_DIR / name
    if not (d / "tokenizer.json").exists():
        raise FileNotFoundError(f"{d}/tokenizer.json is missing (set LATENT_TOKENIZERS_DIR)")
    return d


def run_jsonl(args: list[str], lines: list[dict], tmp_path: Path) -> list[dict]:
    """Runs `latent ARGS --jsonl FILE` over `lines` and returns one JSON object per line."""
    if not LATENT.exists():
        raise RuntimeError(f"{LATENT} is missing: build first")
    path = tmp_path / "input.jsonl"
    path.write_text("".join(json.dumps(line, ensure_ascii=False) + "\n" for line in lines),
                    encoding="utf-8")
    proc = subprocess.run([str(LATENT), *args, "--jsonl", str(path)], capture_output=True)
    assert proc.returncode == 0, proc.stderr.decode(errors="replace")
    # Split on "\n" only: str.splitlines() would also split inside texts at U+2028, \x85, ...
    out = [json.loads(line) for line in proc.stdout.decode().split("\n")[:-1]]
    assert len(out) == len(lines)
    return out


class Reference:
    """HF tokenizers on one tokenizer.json, and the corpus for it."""

    def __init__(self, name: str):
        from transformers import AutoTokenizer

        self.name = name
        self.dir = tokenizer_dir(name)
        self.hf = AutoTokenizer.from_pretrained(str(self.dir)).backend_tokenizer
        added = self.hf.get_added_tokens_decoder()
        # All non-special added tokens and a spread of the special ones (DeepSeek has ~800).
        specials = sorted((t.content for t in added.values() if t.special))
        plain = sorted(t.content for t in added.values() if not t.special)
        picked = plain + specials[:: max(1, len(specials) // 24)]
        self.texts = corpus(picked)
        self.ids = {True: self.encode_all(True), False: self.encode_all(False)}

    def encode_all(self, add_special_tokens: bool) -> list[list[int]]:
        return [e.ids for e in self.hf.encode_batch(self.texts, add_special_tokens=add_special_tokens)]

    def id_sequences(self) -> list[list[int]]:
        """Ids to decode: the corpus encodings, and random sequences over the whole vocabulary
        (specials, byte tokens and partial UTF-8 included)."""
        rng = random.Random(7)
        vocab = self.hf.get_vocab_size(with_added_tokens=True)
        specials = sorted(self.hf.get_added_tokens_decoder())
        byte_ids = [self.hf.token_to_id(f"<0x{b:02X}>") for b in range(256)]
        byte_ids = [i for i in byte_ids if i is not None]
        seqs = list(self.ids[True])
        for _ in range(400):
            seq = []
            for _ in range(rng.randint(1, 40)):
                r = rng.random()
                if r < 0.15 and specials:
                    seq.append(rng.choice(specials))
                elif r < 0.35 and byte_ids:
                    seq.append(rng.choice(byte_ids))
                else:
                    seq.append(rng.randrange(vocab))
            seqs.append(seq)
        return seqs


_references: dict[str, Reference] = {}


def reference(name: str) -> Reference:
    if name not in _references:
        _references[name] = Reference(name)
    return _references[name]


def first_mismatch(texts, got, want):
    for i, (g, w) in enumerate(zip(got, want)):
        if g != w:
            return f"item {i} {texts[i]!r}:\n  latent {g!r}\n  HF     {w!r}"
    return None


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("add_special_tokens", [True, False])
def test_encode_matches_hf(name, add_special_tokens, tmp_path):
    ref = reference(name)
    assert len(ref.texts) >= 2000
    args = ["tokenize", "--tokenizer", str(ref.dir)]
    if not add_special_tokens:
        args.append("--no-special-tokens")
    got = [o["ids"] for o in run_jsonl(args, [{"text": t} for t in ref.texts], tmp_path)]
    mismatch = first_mismatch(ref.texts, got, ref.ids[add_special_tokens])
    n_bad = sum(g != w for g, w in zip(got, ref.ids[add_special_tokens]))
    assert mismatch is None, f"{n_bad} of {len(got)} differ; first: {mismatch}"


def unicode_16_additions() -> list[int]:
    """Every code point Unicode 15.0 and 16.0 assigned, read from the table of stand-ins latent
    matches them as (src/tokenizer/unicode_additions.inc, tools/gen_unicode_additions.py)."""
    import re

    text = (REPO / "src" / "tokenizer" / "unicode_additions.inc").read_text()
    points = set()
    for first, last in re.findall(r"\{0x([0-9A-F]+), 0x([0-9A-F]+), 0x[0-9A-F]+\}", text):
        points.update(range(int(first, 16), int(last, 16) + 1))
    return sorted(points)


@pytest.mark.parametrize("name", ["deepseek_v3", "qwen3"])
def test_characters_of_unicode_15_and_16_split_as_hf(name, tmp_path):
    """HF compiles the split patterns with Oniguruma's Unicode 16.0 tables, latent with PCRE2's
    (14.0 in Debian bookworm): a character assigned since (🫨, CJK Extension H, Kawi letters) must
    still count as the letter, digit or symbol it is. Each probe puts the character beside
    letters, digits, punctuation, a contraction and a newline."""
    points = unicode_16_additions()
    assert len(points) > 10000 and 0x1FAE8 in points and 0x31350 in points
    texts = [f"a{c}'s {c}1{c}!{c}{c} x{c}\n{c}é" for c in map(chr, points)]
    ref = reference(name)
    want = [e.ids for e in ref.hf.encode_batch(texts, add_special_tokens=False)]
    args = ["tokenize", "--tokenizer", str(ref.dir), "--no-special-tokens"]
    got = [o["ids"] for o in run_jsonl(args, [{"text": t} for t in texts], tmp_path)]
    n_bad = sum(g != w for g, w in zip(got, want))
    assert n_bad == 0, f"{n_bad} of {len(got)} differ; first: {first_mismatch(texts, got, want)}"


@pytest.mark.parametrize("name", NAMES)
def test_encode_matches_transformers_autotokenizer(name):
    """The user-facing truth for add_special_tokens=True: AutoTokenizer(...).encode(text)."""
    from transformers import AutoTokenizer

    ref = reference(name)
    auto = AutoTokenizer.from_pretrained(str(ref.dir))
    sample = ref.texts[::7]
    want = [auto.encode(t) for t in sample]
    got = ref.ids[True][::7]
    assert got == want, first_mismatch(sample, got, want)


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("skip_special_tokens", [False, True])
@pytest.mark.parametrize("stream", [False, True])
def test_decode_matches_hf(name, skip_special_tokens, stream, tmp_path):
    """One-shot decoding equals HF's; streaming token by token gives the same text in pieces of
    whole characters."""
    ref = reference(name)
    seqs = ref.id_sequences()
    want = ref.hf.decode_batch(seqs, skip_special_tokens=skip_special_tokens)
    args = ["detokenize", "--tokenizer", str(ref.dir)]
    if skip_special_tokens:
        args.append("--skip-special-tokens")
    if stream:
        args.append("--stream")
    out = run_jsonl(args, [{"ids": s} for s in seqs], tmp_path)
    got = [o["text"] for o in out]
    n_bad = sum(g != w for g, w in zip(got, want))
    assert n_bad == 0, f"{n_bad} of {len(got)} differ; first: {first_mismatch(seqs, got, want)}"
    if stream:
        assert sum(o["partial_pieces"] for o in out) == 0
        # The streaming really streamed: most multi-token texts came out in several pieces.
        multi = [o for s, o in zip(seqs, out) if len(s) > 4 and o["text"]]
        assert sum(len(o["pieces"]) > 1 for o in multi) > 0.8 * len(multi)


def byte_level_table() -> dict[str, int]:
    """GPT-2's byte-level alphabet: printable bytes stand for themselves, the others for 256 +
    their rank."""
    kept = [*range(ord("!"), ord("~") + 1), *range(0xa1, 0xad), *range(0xae, 0x100)]
    table = {chr(b): b for b in kept}
    for n, b in enumerate(b for b in range(256) if b not in kept):
        table[chr(256 + n)] = b
    return table


def after_prompt_reference(ref: Reference, prompt: list[int], output: list[int],
                           skip_special_tokens: bool = True) -> str:
    """vLLM's text for `output` after `prompt` (its detokenizer primed with the prompt), as
    latent's rule states it (src/tokenizer/streaming_detokenizer.h). Tokens decoding drops
    (special ones when skipped) are left out first; an output with none left has no text.
    Byte-level vocabularies: an incremental UTF-8 decoder fed the prompt's bytes first, so the
    bytes of a character the prompt's last bytes began (U+FFFD in the prompt's text) come out
    with the output's. Otherwise (llama2): P' is the prompt without the ByteFallback run it ends
    with; the run's whole characters are closed, its rest (an incomplete character, bytes that
    are no UTF-8) stays open; the text is HF's decoding of P' + open rest + output beyond that of
    P'."""
    specials = {i for i, t in ref.hf.get_added_tokens_decoder().items() if t.special}
    skip = specials if skip_special_tokens else set()
    kept = lambda i: i not in skip and ref.hf.id_to_token(i) is not None  # noqa: E731
    prompt, output = [i for i in prompt if kept(i)], [i for i in output if kept(i)]
    if not output:
        return ""
    if ref.name != "llama2":
        table = byte_level_table()

        def raw(ids):
            out = b""
            for i in ids:
                token = ref.hf.id_to_token(i)
                out += bytes(table[c] for c in token) if all(c in table for c in token) \
                    and i not in specials else token.encode()
            return out

        decoder = codecs.getincrementaldecoder("utf-8")("replace")
        decoder.decode(raw(prompt))
        return decoder.decode(raw(output), final=True)
    run = []
    while prompt and re.fullmatch(r"<0x[0-9A-F]{2}>", ref.hf.id_to_token(prompt[-1]) or ""):
        run.insert(0, prompt.pop())
    closed = whole_characters(bytes(int(ref.hf.id_to_token(i)[3:5], 16) for i in run))
    decode = lambda ids: ref.hf.decode(ids, skip_special_tokens=skip_special_tokens)  # noqa: E731
    before, whole = decode(prompt), decode(prompt + run[closed:] + output)
    assert whole.startswith(before), (prompt, run, output)
    return whole[len(before):]


def whole_characters(data: bytes) -> int:
    """How many bytes at the start of `data` are whole, valid UTF-8 characters."""
    try:
        data.decode()
        return len(data)
    except UnicodeDecodeError as e:
        return e.start


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("stream", [False, True])
def test_output_after_a_prompt_decodes_as_vllm(name, stream, tmp_path):
    """An output's text after its prompt (a detokenize line's "prompt_ids", the server's rule):
    corpus encodings cut at random points, and random sequences."""
    ref = reference(name)
    rng = random.Random(5)
    cases = []
    # Random sequences (invalid bytes, cut characters) for the byte-level vocabularies; llama2's
    # could end a prompt in a valid ByteFallback run that the output's bytes make invalid, where
    # the whole text's decoding no longer extends the prompt's (vLLM's detokenizer fails there).
    randoms = ref.id_sequences()[-300:] if name != "llama2" else []
    for ids in [*ref.ids[True][:500], *randoms]:
        if len(ids) >= 2:
            cut = rng.randrange(1, len(ids))
            cases.append((ids[:cut], ids[cut:]))
    want = [after_prompt_reference(ref, p, o) for p, o in cases]
    args = ["detokenize", "--tokenizer", str(ref.dir), "--skip-special-tokens"]
    if stream:
        args.append("--stream")
    out = run_jsonl(args, [{"prompt_ids": p, "ids": o} for p, o in cases], tmp_path)
    got = [o["text"] for o in out]
    n_bad = sum(g != w for g, w in zip(got, want))
    assert n_bad == 0, f"{n_bad} of {len(got)} differ; first: {first_mismatch(cases, got, want)}"
    # A SentencePiece output's first token keeps its space, a byte-level prompt's cut character
    # is completed by the output: both happen in these cases.
    if name == "llama2":
        assert sum(w.startswith(" ") for w in want) > 10
    else:
        assert any(ref.hf.decode(p).endswith("\ufffd") for p, _ in cases)


def random_prompt_output_pairs(ref: Reference, n: int, seed: int):
    """Short random prompts and outputs that often cut characters: special tokens, <0xAB>
    tokens, tokens with bytes of non-ASCII characters, any tokens."""
    rng = random.Random(seed)
    vocab = ref.hf.get_vocab()
    specials = sorted(i for i, t in ref.hf.get_added_tokens_decoder().items() if t.special)
    byte_ids = sorted(i for t, i in vocab.items() if re.fullmatch(r"<0x[0-9A-F]{2}>", t))
    non_ascii = sorted(i for t, i in vocab.items() if not t.isascii() and not t.startswith("▁"))

    def token():
        r = rng.random()
        if r < 0.05:
            return rng.choice(specials)
        if r < 0.35 and byte_ids:
            return rng.choice(byte_ids)
        if r < 0.55:
            return rng.choice(non_ascii)
        return rng.randrange(32000)

    return [([token() for _ in range(rng.choice([0, 1, 2, 3, 5, 9, 12]))],
             [token() for _ in range(rng.randrange(10))]) for _ in range(n)]


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("skip_special_tokens", [True, False])
def test_random_outputs_after_random_prompts(name, skip_special_tokens, tmp_path):
    """Streamed text equals the non-streamed one and after_prompt_reference's rule. Against
    HF's text of prompt + output beyond the prompt's (where it extends it), each case is one of:
    - "extends": the same text;
    - "held": the prompt's text ends in k U+FFFD for bytes still open (a character its last
      bytes began; llama2: an open ByteFallback run); they come out again with the output, as
      what the output's bytes make of them: HF's text of prompt + output past the prompt's
      text less its last k characters (so a stop string may match them; vLLM does the same);
    - "closed" (llama2): the prompt ends in a ByteFallback run with whole characters, which the
      output's bytes would join (and make U+FFFD, or other characters); the output's text is
      its decoding after the prompt's last other token and the run's open rest.
    An output with no tokens left after skipping has no text, whatever the prompt held."""
    ref = reference(name)
    seed = NAMES.index(name) * 2 + skip_special_tokens
    cases = random_prompt_output_pairs(ref, 300, seed)
    args = ["detokenize", "--tokenizer", str(ref.dir)]
    if skip_special_tokens:
        args.append("--skip-special-tokens")
    lines = [{"prompt_ids": p, "ids": o} for p, o in cases]
    plain = [o["text"] for o in run_jsonl(args, lines, tmp_path)]
    streamed = run_jsonl([*args, "--stream"], lines, tmp_path)
    assert all("".join(o["pieces"]) == o["text"] for o in streamed)
    assert [o["text"] for o in streamed] == plain
    classes = {"extends": 0, "held": 0, "closed": 0, "empty": 0}
    for (prompt, output), got in zip(cases, plain):
        want = after_prompt_reference(ref, prompt, output, skip_special_tokens)
        assert got == want, (prompt, output)
        decode = lambda ids: ref.hf.decode(ids, skip_special_tokens=skip_special_tokens)  # noqa
        before, whole = decode(prompt), decode(prompt + output)
        held = len(before) - len(before.rstrip("\ufffd"))
        if got == "" and decode(output) == "":
            classes["empty"] += 1
        elif whole.startswith(before) and got == whole[len(before):]:
            classes["extends"] += 1
        elif any(got == whole[len(before) - k:] for k in range(1, held + 1)):
            classes["held"] += 1
        else:
            assert name == "llama2" and re.fullmatch(r"<0x..>", ref.hf.id_to_token(
                prompt[-1]) or ""), (prompt, output, before, whole, got)
            classes["closed"] += 1
    assert classes["held"] > 0 and classes["extends"] > 200, classes
    if name == "llama2":
        assert classes["closed"] > 0, classes


INVALID_UTF8 = [b"\xff", b"abc\xffdef", b"\xe4\xb8", b"x\xe4\xb8", b"\xed\xa0\x80 surrogate",
                b"\xc0\xaf overlong", b"\xf4\x90\x80\x80 too big", b"\xf0\x9f\x98 cut emoji",
                b"\x80\x80\x80 continuation", b"ok \xe2\x82\xac \xe2\x82 \xe2", b"\xfe\xfe\xff\xff"]


@pytest.mark.parametrize("name", NAMES)
def test_invalid_utf8_is_replaced_like_python(name):
    """Policy: each maximal invalid subsequence becomes U+FFFD, as bytes.decode('utf-8',
    'replace') does, so ids equal HF's on the text a Python client would decode."""
    ref = reference(name)
    for raw in INVALID_UTF8:
        proc = subprocess.run([str(LATENT), "tokenize", "--tokenizer", str(ref.dir), "--text", raw],
                              capture_output=True)
        assert proc.returncode == 0, proc.stderr
        got = json.loads(proc.stdout)["ids"]
        assert got == ref.hf.encode(raw.decode("utf-8", "replace")).ids, raw


def test_tokenizer_defaults_to_model_dir():
    ref = reference("qwen3")
    proc = subprocess.run([str(LATENT), "tokenize", "--model", str(ref.dir), "--text", "Hello"],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["ids"] == ref.hf.encode("Hello").ids
    proc = subprocess.run([str(LATENT), "detokenize", "--model", str(ref.dir), "--ids", "9707,1879"],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["text"] == ref.hf.decode([9707, 1879])


def test_unreadable_input_is_a_clean_error(tmp_path):
    ref = reference("qwen3")
    bad = tmp_path / "bad.jsonl"
    bad.write_bytes(b'{"text": "ok"}\n{"text": "\xff"}\nnot json\n')
    proc = subprocess.run([str(LATENT), "tokenize", "--tokenizer", str(ref.dir), "--jsonl", str(bad)],
                          capture_output=True, text=True, errors="replace")
    assert proc.returncode == 2
    # Each bad line's error in its place; the good line is still tokenized.
    out = [json.loads(line) for line in proc.stdout.splitlines()]
    assert out[0] == {"ids": ref.hf.encode("ok").ids}
    assert "bad.jsonl:2: not valid JSON" in out[1]["error"]
    assert "bad.jsonl:3: not valid JSON" in out[2]["error"]


SEEDS = REPO / "tests" / "fuzz" / "tokenizer_seeds"


@pytest.mark.parametrize("seed", ["byte_level", "sentencepiece", "metaspace_first", "misc", "split"])
def test_component_tokenizers_match_hf(seed, tmp_path):
    """The fuzz seeds' small tokenizer.json files cover what the three real tokenizers do not use
    (Whitespace, Punctuation, Digits, Metaspace "first", NFKD, StripAccents, Nmt, Strip,
    subword prefix/suffix with unk, ignore_merges, Split behaviours and invert, Bert/Roberta
    templates, Metaspace/BPEDecoder/Strip decoders): encode and decode, streaming included."""
    from tokenizers import Tokenizer

    d = tmp_path / seed
    d.mkdir()
    (d / "tokenizer.json").write_bytes((SEEDS / f"{seed}.json").read_bytes())
    hf = Tokenizer.from_file(str(d / "tokenizer.json"))
    texts = corpus([t.content for t in hf.get_added_tokens_decoder().values()])[::3]
    for special in (True, False):
        args = ["tokenize", "--tokenizer", str(d)] + ([] if special else ["--no-special-tokens"])
        got = [o["ids"] for o in run_jsonl(args, [{"text": t} for t in texts], tmp_path)]
        want = [e.ids for e in hf.encode_batch(texts, add_special_tokens=special)]
        assert got == want, first_mismatch(texts, got, want)
    seqs = [e.ids for e in hf.encode_batch(texts)]
    for skip in (False, True):
        want = hf.decode_batch(seqs, skip_special_tokens=skip)
        for stream in (False, True):
            args = (["detokenize", "--tokenizer", str(d)] + (["--skip-special-tokens"] if skip else [])
                    + (["--stream"] if stream else []))
            got = [o["text"] for o in run_jsonl(args, [{"ids": s} for s in seqs], tmp_path)]
            assert got == want, first_mismatch(seqs, got, want)


@pytest.mark.parametrize("command,good,bad", [
    ("tokenize", [{"text": "hello"}, {"text": "world"}],
     ['{"text": 5}', "not json", "[1]", '{"txt": "x"}']),
    ("detokenize", [{"ids": [1, 2]}, {"ids": [3]}],
     ['{"ids": [-1]}', "{", '{"ids": "1"}', '{"ids": [1], "prompt_ids": 2}']),
])
def test_jsonl_bad_lines_are_reported_in_place(command, good, bad, tmp_path):
    """A bad --jsonl line prints {"error": ...} where its result would be and the other lines go
    on (as render-chat --requests); the command exits 2 after the last line."""
    path = tmp_path / "lines.jsonl"
    lines = [json.dumps(good[0]), *bad, json.dumps(good[1])]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    args = [str(LATENT), command, "--tokenizer", str(tokenizer_dir("qwen3")), "--jsonl"]
    proc = subprocess.run([*args, str(path)], capture_output=True)
    assert proc.returncode == 2, proc.stderr.decode(errors="replace")
    out = [json.loads(line) for line in proc.stdout.decode().split("\n")[:-1]]
    assert len(out) == len(lines)
    alone = [json.loads(subprocess.run([*args, "-"], input=(json.dumps(g) + "\n").encode(),
                                       capture_output=True, check=True).stdout) for g in good]
    assert [out[0], out[-1]] == alone
    for i, result in enumerate(out[1:-1], start=2):
        assert set(result) == {"error"}, result
        assert result["error"].startswith(f"{path}:{i}: "), result
