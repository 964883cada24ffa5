"""Kimi's tokenizer (tiktoken.model + tokenizer_config.json, as Kimi K2 and Kimi Linear ship it)
against PyPI's tiktoken: a tiktoken.Encoding built from the same ranks, Kimi's published split
pattern and Kimi's special tokens, encoding with allowed_special="all" as tokenization_kimi.py does.

No Kimi tokenizer file is available offline, so the fixture is written here: the byte-level BPE of
../shared/tokenizers/qwen3 (whose ids follow its merge order) as tiktoken.model lines (base64 token
bytes and rank), and a tokenizer_config.json whose added_tokens_decoder holds Kimi K2's special
tokens, moved from 163584 on to just above that vocabulary.

Also here: the PCRE2 form of Kimi's split pattern (read from src/tokenizer/kimi_split_pattern.h)
against the published one with its class intersections, on Python's `regex` module (V1 mode, which
understands `[...&&...]`); errors for malformed files; `render-chat`, `generate --prompt` and
`serve` on a Kimi tokenizer directory. The file takes about 40 s of CPU (132 s wall measured on a
shared, busy 2-core machine)."""

from __future__ import annotations

import base64
import copy
import json
import random
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import LATENT, REPO, latent_generate, make_tiny_model
from tokenizer_corpus import corpus

sys.path.insert(0, str(REPO / "tests" / "chat"))
sys.path.insert(0, str(REPO / "tests" / "e2e"))
from chat_corpus import conversations  # noqa: E402

# ../shared beside the repository (CI clones it there); worktrees use the main checkout's.
SHARED = next((p for p in (REPO.parent / "shared", Path("/work/shared")) if p.is_dir()),
              REPO.parent / "shared")
QWEN3 = SHARED / "tokenizers" / "qwen3" / "tokenizer.json"
KIMI_TEMPLATE = SHARED / "chat-templates" / "kimi-k2.jinja"

# tokenization_kimi.py's pat_str, as Moonshot publishes it (Kimi K2, Kimi Linear).
KIMI_PAT_STR = "|".join([
    r"""[\p{Han}]+""",
    r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]*[\p{Ll}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
    r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]+[\p{Ll}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
    r"""\p{N}{1,3}""",
    r""" ?[^\s\p{L}\p{N}]+[\r\n]*""",
    r"""\s*[\r\n]+""",
    r"""\s+(?!\S)""",
    r"""\s+""",
])

# Kimi K2's named special tokens (tokenizer_config.json's added_tokens_decoder), by offset from
# its first special id, 163584; the other ids up to +257 are <|reserved_token_ID|>.
KIMI_K2_SPECIALS = {
    0: "[BOS]", 1: "[EOS]", 2: "<|im_end|>", 3: "<|im_user|>", 4: "<|im_assistant|>",
    6: "<|start_header_id|>", 7: "<|end_header_id|>", 9: "[EOT]", 10: "<|im_system|>",
    11: "<|tool_calls_section_begin|>", 12: "<|tool_calls_section_end|>", 13: "<|tool_call_begin|>",
    14: "<|tool_call_argument_begin|>", 15: "<|tool_call_end|>", 17: "<|im_middle|>",
    254: "[UNK]", 255: "[PAD]",
}
NUM_SPECIAL_IDS = 256 + 2  # tokenization_kimi.py: num_reserved_special_tokens + 2

# Han (with Han-script characters that are not letters: 々 Lm, 〇 Nl, ⺀ So), other letters and
# marks around it, contractions, numbers and whitespace: what the split pattern treats apart.
HAN_AND_MIXED = [
    "你好，世界！", "中华人民共和国成立于1949年10月1日。", "我爱北京天安门 I love Beijing",
    "漢字かな交じり文：東京タワーへ行きます。", "カタカナと漢字と ひらがな", "々〇⺀⼀ 人々 〇〇七",
    "𠀀𠀁𪜀 ext-B 汉字 𫝀", "한국어와 中文 그리고 English", "中文English混合Text测试",
    "ABC中文def GHI文字jkl", "I'M sure it'S theirs; WE'LL see 他'S 中'll", "ǅungla ǅ文字 Ǆ Ǉ",
    "e\u0301t\u00e9 文\u0301字 a\u0301\u0302\u0303", "ʰʲ ᵃᵇ ー中ー ーabc", "Straße 中 straße STRASSE",
    "数字123456789 一二三 ١٢٣ Ⅻ ½", "  中  文  \n\n漢\r\n字\t\t文 ", "「引用」『二重』【括弧】〔注〕",
    "中。\n文！？\n\n", "الله 中 עברית 字 ไทย", "😀中文😀 👨‍👩‍👧 漢", "ｶﾀｶﾅ半角 全角ＡＢＣ１２３ 中",
    "ſ's K'LL 中'D", "\u3000中\u3000文\u3000", "x" * 300 + "中" * 300 + " y" * 50,
]


def special_token_strings(specials: dict[str, int]) -> list[str]:
    names = sorted(specials, key=specials.get)
    named = [n for n in names if not n.startswith("<|reserved_token_")]
    reserved = [n for n in names if n.startswith("<|reserved_token_")]
    return [
        "".join(named), " ".join(named), "\n".join(named),
        "<|im_system|>system<|im_middle|>You are Kimi.<|im_end|><|im_user|>user<|im_middle|>你好!<|im_end|>",
        "[BOS]Hello[EOS] [BOS] [EOS]\n[BOS]\n", "<|im_end|<|im_end|>> <|im_end <||im_end|>|>",
        f"{reserved[0]}{reserved[-1]} {reserved[len(reserved) // 2]}x <|reserved_token_1|>",
        "[BOS[EOS]] [[BOS]] [UNK][PAD] [unk] <|IM_END|>", "中<|im_end|>文<|im_middle|>字",
    ]


def bytes_to_unicode() -> dict[int, str]:
    """GPT-2's byte-level alphabet: printable Latin-1 bytes stand for themselves, the rest take
    the characters from U+0100 on."""
    keep = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    chars = {b: chr(b) for b in keep}
    n = 0
    for b in range(256):
        if b not in chars:
            chars[b] = chr(256 + n)
            n += 1
    return chars


def qwen3_ranks() -> dict[bytes, int]:
    vocab = json.loads(QWEN3.read_text(encoding="utf-8"))["model"]["vocab"]
    byte_of = {c: b for b, c in bytes_to_unicode().items()}
    ranks = {bytes(byte_of[c] for c in token): i for token, i in vocab.items()}
    assert sorted(ranks.values()) == list(range(len(ranks))), "qwen3's ids are not dense"
    return ranks


class KimiFixture:
    """A Kimi tokenizer directory and the tiktoken.Encoding that is its reference."""

    def __init__(self, out: Path, ranks: dict[bytes, int]):
        import tiktoken

        out.mkdir(parents=True)
        self.dir = out
        n = len(ranks)
        with open(out / "tiktoken.model", "w", encoding="ascii") as f:
            for token, rank in sorted(ranks.items(), key=lambda kv: kv[1]):
                f.write(f"{base64.b64encode(token).decode()} {rank}\n")
        named = {n + off: content for off, content in KIMI_K2_SPECIALS.items()}
        config = {
            "added_tokens_decoder": {
                str(i): {"content": c, "lstrip": False, "normalized": False, "rstrip": False,
                         "single_word": False, "special": True} for i, c in named.items()},
            "bos_token": "[BOS]", "eos_token": "[EOS]", "pad_token": "[PAD]", "unk_token": "[UNK]",
            "additional_special_tokens": ["<|im_end|>", "<|im_user|>", "<|im_assistant|>",
                                          "<|start_header_id|>", "<|end_header_id|>", "[EOT]",
                                          "<|im_system|>", "<|im_middle|>"],
            "tokenizer_class": "TikTokenTokenizer", "model_max_length": 1048576,
        }
        (out / "tokenizer_config.json").write_text(json.dumps(config, indent=2))
        shutil.copy(KIMI_TEMPLATE, out / "chat_template.jinja")
        self.specials = {named.get(i, f"<|reserved_token_{i}|>"): i
                         for i in range(n, n + NUM_SPECIAL_IDS)}
        self.enc = tiktoken.Encoding(name="kimi-fixture", pat_str=KIMI_PAT_STR,
                                     mergeable_ranks=ranks, special_tokens=self.specials)

    def encode(self, text: str) -> list[int]:
        return self.enc.encode(text, allowed_special="all")

    def files(self) -> list[Path]:
        return [self.dir / f for f in ("tiktoken.model", "tokenizer_config.json", "chat_template.jinja")]


@pytest.fixture(scope="module")
def kimi(tmp_path_factory) -> KimiFixture:
    return KimiFixture(tmp_path_factory.mktemp("kimi") / "tokenizer", qwen3_ranks())


def run_jsonl(args: list[str], lines: list[dict], tmp_path: Path) -> list[dict]:
    path = tmp_path / "input.jsonl"
    path.write_text("".join(json.dumps(line, ensure_ascii=False) + "\n" for line in lines),
                    encoding="utf-8")
    proc = subprocess.run([str(LATENT), *args, "--jsonl", str(path)], capture_output=True)
    assert proc.returncode == 0, proc.stderr.decode(errors="replace")
    out = [json.loads(line) for line in proc.stdout.decode().split("\n")[:-1]]
    assert len(out) == len(lines)
    return out


def first_mismatch(inputs, got, want) -> str | None:
    for i, (g, w) in enumerate(zip(got, want)):
        if g != w:
            return f"item {i} {inputs[i]!r}:\n  latent   {g!r}\n  tiktoken {w!r}"
    return None


# -- the split pattern --

def pcre2_pattern() -> str:
    """kKimiSplitPattern as latent compiles it: the raw string literals of its definition."""
    source = (REPO / "src" / "tokenizer" / "kimi_split_pattern.h").read_text(encoding="utf-8")
    definition = source.split("kKimiSplitPattern =", 1)[1].split(";", 1)[0]
    return "".join(re.findall(r'R"\((.*?)\)"', definition, flags=re.S))


def random_strings(count: int, seed: int) -> list[str]:
    """Strings over the characters where the intersection matters: Han (letters and not), other
    letters of every case class, marks, numbers, apostrophes, whitespace and punctuation."""
    alphabet = (
        list("中文字漢人々〇⺀⼀") + ["\U00020000", "\U0002A700"]
        + list("AbCdEfSsTtMmLlDdRrVv") + list("ǅǈǋ") + list("ʰʲᵃー") + list("かカ한اกא")
        + ["\u0301", "\u0e31", "\u3099", "\u200d"] + list("0123456789١Ⅻ½")
        + list("'''ſK") + [" ", " ", " ", "\t", "\n", "\r", "\u3000", "\xa0"]
        + list(",.!?「」、。—-_@#😀")
    )
    rng = random.Random(seed)
    return ["".join(rng.choice(alphabet) for _ in range(rng.randint(1, 24))) for _ in range(count)]


def test_split_pattern_rewrite_matches_class_intersection():
    """The lookahead form in kimi_split_pattern.h splits every string exactly as the published
    pattern with `[...&&[^\\p{Han}]]` does (Python's regex module, V1 mode, as the oracle)."""
    import regex

    rewritten = pcre2_pattern()
    assert "&&" not in rewritten and rewritten.count("(?!\\p{sc=Han})") == 4
    original = regex.compile(KIMI_PAT_STR, flags=regex.V1)
    mine = regex.compile(rewritten, flags=regex.V1)
    texts = random_strings(6000, seed=5) + HAN_AND_MIXED + corpus()[::4]
    for text in texts:
        want = [m.span() for m in original.finditer(text)]
        assert [m.span() for m in mine.finditer(text)] == want, repr(text)
    # The oracle really exercises the intersection: Han is split from the letters around it.
    assert original.findall("abc中文Def") == ["abc", "中文", "Def"]


# -- encoding and decoding --

def kimi_texts(kimi: KimiFixture) -> list[str]:
    named = [s for s in kimi.specials if not s.startswith("<|reserved_token_")]
    return corpus(named) + HAN_AND_MIXED + special_token_strings(kimi.specials)


@pytest.mark.parametrize("add_special_tokens", [True, False])
def test_encode_matches_tiktoken(kimi, add_special_tokens, tmp_path):
    texts = kimi_texts(kimi)
    assert len(texts) >= 2000
    want = [kimi.encode(t) for t in texts]
    args = ["tokenize", "--tokenizer", str(kimi.dir)]
    if not add_special_tokens:
        args.append("--no-special-tokens")
    got = [o["ids"] for o in run_jsonl(args, [{"text": t} for t in texts], tmp_path)]
    n_bad = sum(g != w for g, w in zip(got, want))
    assert n_bad == 0, f"{n_bad} of {len(got)} differ; first: {first_mismatch(texts, got, want)}"
    # Special tokens were really matched (not spelled out byte by byte).
    assert sum(any(i >= min(kimi.specials.values()) for i in ids) for ids in got) > 100


@pytest.mark.parametrize("skip_special_tokens", [False, True])
@pytest.mark.parametrize("stream", [False, True])
def test_decode_matches_tiktoken(kimi, skip_special_tokens, stream, tmp_path):
    """Encoded texts decode back to themselves; random ids (special tokens and partial UTF-8
    included) decode as tiktoken's decode(errors="replace") does."""
    texts = kimi_texts(kimi)[::2]
    seqs = [kimi.encode(t) for t in texts]
    special_ids = sorted(kimi.specials.values())
    rng = random.Random(11)
    vocab = max(special_ids) + 1
    for _ in range(400):
        seqs.append([rng.choice(special_ids) if rng.random() < 0.15 else rng.randrange(vocab)
                     for _ in range(rng.randint(1, 40))])
    special = set(special_ids)
    want = [kimi.enc.decode([i for i in s if not (skip_special_tokens and i in special)])
            for s in seqs]
    args = ["detokenize", "--tokenizer", str(kimi.dir)]
    if skip_special_tokens:
        args.append("--skip-special-tokens")
    if stream:
        args.append("--stream")
    out = run_jsonl(args, [{"ids": s} for s in seqs], tmp_path)
    got = [o["text"] for o in out]
    n_bad = sum(g != w for g, w in zip(got, want))
    assert n_bad == 0, f"{n_bad} of {len(got)} differ; first: {first_mismatch(seqs, got, want)}"
    if not skip_special_tokens:
        assert got[: len(texts)] == texts  # round trip
    if stream:
        assert sum(o["partial_pieces"] for o in out) == 0


def test_random_vocabularies_match_tiktoken(tmp_path):
    """tiktoken's merge order on small random vocabularies over {a, b, c}, where one token often
    has several splits into two tokens and equal-rank pairs compete: the leftmost lowest-ranked
    pair merges first, and a piece that is a token is taken whole."""
    import tiktoken

    rng = random.Random(3)
    for trial in range(6):
        words = {"".join(rng.choice("abc") for _ in range(rng.randint(2, 5))) for _ in range(60)}
        extra = sorted(words)
        rng.shuffle(extra)
        ranks = {bytes([b]): b for b in range(256)}
        for w in extra:
            ranks[w.encode()] = len(ranks)
        d = tmp_path / f"v{trial}"
        d.mkdir()
        (d / "tiktoken.model").write_text(
            "".join(f"{b64(t)} {r}\n" for t, r in ranks.items()), encoding="ascii")
        (d / "tokenizer_config.json").write_text("{}")
        enc = tiktoken.Encoding(name="v", pat_str=KIMI_PAT_STR, mergeable_ranks=ranks,
                                special_tokens={})
        texts = ["".join(rng.choice("abc") for _ in range(rng.randint(1, 16))) for _ in range(300)]
        texts += [" ".join(texts[i:i + 3]) for i in range(0, 60, 3)]
        got = [o["ids"] for o in run_jsonl(["tokenize", "--tokenizer", str(d)],
                                           [{"text": t} for t in texts], tmp_path)]
        want = [enc.encode(t) for t in texts]
        assert got == want, first_mismatch(texts, got, want)


def test_token_strings_and_vocab(kimi):
    proc = subprocess.run([str(LATENT), "tokenize", "--tokenizer", str(kimi.dir), "--text",
                           "[BOS]中文 Hello<|im_end|>"], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["ids"] == kimi.encode("[BOS]中文 Hello<|im_end|>")


# -- malformed files --

def write_tokenizer(d: Path, lines: list[str], config: dict | None = None) -> Path:
    d.mkdir()
    (d / "tiktoken.model").write_text("".join(l + "\n" for l in lines))
    (d / "tokenizer_config.json").write_text(json.dumps(config if config is not None else {}))
    return d


def byte_lines() -> list[str]:
    return [f"{base64.b64encode(bytes([b])).decode()} {b}" for b in range(256)]


def b64(s: bytes) -> str:
    return base64.b64encode(s).decode()


@pytest.mark.parametrize("name,lines,config,message", [
    ("bad_base64", byte_lines() + ["a$c= 256"], None, "tiktoken.model:257: 'a$c=' is not valid base64"),
    ("bad_padding", byte_lines() + ["YWJ 256"], None, "tiktoken.model:257: 'YWJ' is not valid base64"),
    ("duplicate_rank", byte_lines() + [f"{b64(b'ab')} 7"], None,
     "tiktoken.model:257: rank 7 is given twice (first on line 8)"),
    ("duplicate_token", byte_lines() + [f"{b64(b'a')} 256"], None,
     "tiktoken.model:257: token 'a' is given twice (first on line 98)"),
    ("one_field", byte_lines() + [b64(b"ab")], None, "tiktoken.model:257: expected 'BASE64 RANK'"),
    ("bad_rank", byte_lines() + [f"{b64(b'ab')} -3"], None, "tiktoken.model:257: rank '-3' is not a whole number"),
    ("rank_gap", byte_lines() + [f"{b64(b'ab')} 300"], None,
     "rank 300 is not below the number of tokens, 257"),
    ("missing_byte", byte_lines()[:65] + [f"{b64(b'xy')} 65"] + byte_lines()[66:], None,
     "byte 0x41 has no token of its own"),
    ("empty", [], None, "tiktoken.model: no tokens"),
    ("bad_config", byte_lines(), {"added_tokens_decoder": {"x1": {"content": "[BOS]"}}},
     "tokenizer_config.json: added_tokens_decoder key 'x1' is not a token id"),
    ("twice_named", byte_lines(), {"added_tokens_decoder": {"256": {"content": "[A]"}, "257": {"content": "[A]"}}},
     "special token '[A]' has two ids, 256 and 257"),
])
def test_malformed_files_are_clear_errors(tmp_path, name, lines, config, message):
    d = write_tokenizer(tmp_path / name, lines, config)
    proc = subprocess.run([str(LATENT), "tokenize", "--tokenizer", str(d), "--text", "hi"],
                          capture_output=True, text=True)
    assert proc.returncode == 2, proc.stdout
    assert message in proc.stderr and str(d) in proc.stderr, proc.stderr


def test_missing_files_are_clear_errors(tmp_path):
    only_config = tmp_path / "only_config"
    only_config.mkdir()
    (only_config / "tokenizer_config.json").write_text("{}")
    proc = subprocess.run([str(LATENT), "tokenize", "--tokenizer", str(only_config), "--text", "hi"],
                          capture_output=True, text=True)
    assert proc.returncode == 2
    assert "tokenizer.json not found, nor tiktoken.model" in proc.stderr, proc.stderr
    only_model = tmp_path / "only_model"
    only_model.mkdir()
    (only_model / "tiktoken.model").write_text("".join(l + "\n" for l in byte_lines()))
    proc = subprocess.run([str(LATENT), "tokenize", "--tokenizer", str(only_model), "--text", "hi"],
                          capture_output=True, text=True)
    assert proc.returncode == 2
    assert "tokenizer_config.json not found (tiktoken.model needs it" in proc.stderr, proc.stderr


# -- chat template, generate, serve --

@pytest.fixture(scope="module")
def transformers_kimi_template(tmp_path_factory):
    """transformers' apply_chat_template with Kimi K2's template: on a copy of the deepseek_v3
    tokenizer files (transformers cannot load the fixture without Kimi's remote code, and the
    rendering does not depend on the vocabulary)."""
    from transformers import AutoTokenizer

    d = tmp_path_factory.mktemp("kimi-template")
    for f in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(SHARED / "tokenizers" / "deepseek_v3" / f, d / f)
    shutil.copy(KIMI_TEMPLATE, d / "chat_template.jinja")
    tok = AutoTokenizer.from_pretrained(str(d))

    def render(messages, tools=None, add_generation_prompt=True, **kwargs) -> str:
        return tok.apply_chat_template(messages, tools=tools, tokenize=False,
                                       add_generation_prompt=add_generation_prompt, **kwargs)
    return render


def test_chat_template_renders_like_transformers(kimi, transformers_kimi_template, tmp_path):
    """Kimi K2's chat template from a Kimi tokenizer directory renders byte for byte as
    transformers renders it, and the rendered prompt tokenizes as tiktoken does."""
    convs = conversations()
    requests, expected = [], []
    for conv in convs:
        req = {"messages": conv["messages"], "add_generation_prompt": conv["add_generation_prompt"]}
        if "tools" in conv:
            req["tools"] = conv["tools"]
        if "kwargs" in conv:
            req["chat_template_kwargs"] = conv["kwargs"]
        requests.append(req)
        try:
            expected.append(transformers_kimi_template(
                copy.deepcopy(conv["messages"]), tools=copy.deepcopy(conv.get("tools")),
                add_generation_prompt=conv["add_generation_prompt"],
                **copy.deepcopy(conv.get("kwargs", {}))))
        except Exception:  # transformers cannot render it: latent must refuse it too
            expected.append(None)
    path = tmp_path / "requests.jsonl"
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in requests), encoding="utf-8")
    proc = subprocess.run([str(LATENT), "render-chat", "--tokenizer", str(kimi.dir), "--requests",
                           str(path)], capture_output=True)
    mine = [json.loads(line) for line in proc.stdout.decode("utf-8").splitlines()]
    assert len(mine) == len(requests), proc.stderr.decode()
    rendered_ok = [(m, e) for m, e in zip(mine, expected) if e is not None]
    assert len(rendered_ok) >= 30
    for m, e in zip(mine, expected):
        if e is None:
            assert isinstance(m, dict) and "error" in m, m
        else:
            assert m == e
    texts = [e for _, e in rendered_ok]
    got = [o["ids"] for o in run_jsonl(["tokenize", "--tokenizer", str(kimi.dir)],
                                       [{"text": t} for t in texts], tmp_path)]
    want = [kimi.encode(t) for t in texts]
    assert got == want, first_mismatch(texts, got, want)


@pytest.fixture(scope="module")
def kimi_model(tmp_path_factory) -> tuple[Path, KimiFixture]:
    """A tiny random Kimi K2 model carrying a Kimi tokenizer of the first 3,000 qwen3 ranks (so
    that the embedding stays small)."""
    ranks = {t: r for t, r in qwen3_ranks().items() if r < 3000}
    root = tmp_path_factory.mktemp("kimi-model")
    fixture = KimiFixture(root / "tokenizer", ranks)
    model_dir = root / "model"
    make_tiny_model(model_dir, "kimi_k2", config={"vocab_size": 3000 + NUM_SPECIAL_IDS,
                                                   "max_position_embeddings": 1024})
    for f in fixture.files():
        shutil.copy(f, model_dir / f.name)
    return model_dir, fixture


def test_generate_prompt_with_kimi_tokenizer(kimi_model):
    model_dir, fixture = kimi_model
    prompt = "中文 and English: 你好, Kimi!<|im_end|>"
    proc = subprocess.run([str(LATENT), "generate", "--model", str(model_dir), "--prompt", prompt,
                           "--max-tokens", "5", "--ignore-eos"], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    assert result["ids"] == latent_generate(model_dir, fixture.encode(prompt), 5, ignore_eos=True)
    special = set(fixture.specials.values())
    assert result["text"] == fixture.enc.decode([i for i in result["ids"] if i not in special])


def test_serve_with_kimi_tokenizer(kimi_model, transformers_kimi_template, tmp_path):
    from e2e_harness import LatentServer

    model_dir, fixture = kimi_model
    server = LatentServer(model_dir, tmp_path / "serve.log")
    try:
        client = server.client()
        messages = [{"role": "system", "content": "You are Kimi."},
                    {"role": "user", "content": "你好！What is MLA?"}]
        chat = client.chat.completions.create(model="tiny", messages=messages, max_tokens=4,
                                              temperature=0, extra_body={"ignore_eos": True})
        prompt_ids = fixture.encode(transformers_kimi_template(messages))
        assert chat.usage.prompt_tokens == len(prompt_ids)
        out_ids = latent_generate(model_dir, prompt_ids, 4, ignore_eos=True)
        special = set(fixture.specials.values())
        assert chat.choices[0].message.content == fixture.enc.decode(
            [i for i in out_ids if i not in special])
        completion = client.completions.create(model="tiny", prompt="漢字 and kana かな", max_tokens=3,
                                               temperature=0)
        assert completion.usage.prompt_tokens == len(fixture.encode("漢字 and kana かな"))
    finally:
        assert server.stop() == 0, server.log()
