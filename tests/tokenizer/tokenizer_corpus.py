"""A deterministic (seeded) corpus of strings for tokenizer parity tests: many scripts, emoji and
ZWJ sequences, combining marks, code, numbers of every length, whitespace runs, special tokens
inside text, very long words and empty strings. `corpus(added_tokens)` returns the list; the same
seed always gives the same strings."""

from __future__ import annotations

import random

SEED = 20240601

# Words and phrases per script, written out so that the text looks like real language (common
# words drive the merges that matter), plus character ranges for random "words".
SCRIPT_SAMPLES = {
    "latin": ["The quick brown fox jumps over the lazy dog.", "naïve café résumé coöperate",
              "Straße Größe Übermäßig", "Tiếng Việt có dấu: người, được, những",
              "¿Dónde está la biblioteca? ¡Allí!", "Œuvre, æsthetic, ﬁnancial ligatures",
              "Ångström, Øre, Łódź, Çağrı, Ğüzel, İstanbul, ıi"],
    "cyrillic": ["Съешь же ещё этих мягких французских булок, да выпей чаю.",
                 "Україна, Київ, їжак, ґанок", "Ђорђе, Љубљана, Њујорк"],
    "greek": ["Ξεσκεπάζω την ψυχοφθόρα βδελυγμία.", "ΣΊΣΥΦΟΣ σίσυφος ς"],
    "cjk": ["我能吞下玻璃而不伤身体。", "中华人民共和国成立于1949年", "繁體中文與简体中文",
            "いろはにほへと ちりぬるを", "カタカナとひらがなと漢字を混ぜる文章です。",
            "ｶﾀｶﾅ半角、全角ＡＢＣ１２３", "다람쥐 헌 쳇바퀴에 타고파", "한국어 문장입니다."],
    "arabic": ["نص حكيم له سر قاطع وذو شأن عظيم مكتوب على ثوب أخضر", "العربية ١٢٣٤٥٦٧٨٩٠",
               "فارسی: گچپژ", "اردو میں خوش آمدید"],
    "hebrew": ["דג סקרן שט בים מאוכזב ולפתע מצא חברה", "שָׁלוֹם עוֹלָם"],
    "devanagari": ["ऋषियों को सताने वाले दुष्ट राक्षसों के राजा रावण का सर्वनाश करने वाले",
                   "हिन्दी ०१२३४५६७८९", "संस्कृतम् क्षत्रिय ज्ञान"],
    "thai": ["เป็นมนุษย์สุดประเสริฐเลิศคุณค่า กว่าบรรดาฝูงสัตว์เดรัจฉาน", "ภาษาไทย ๑๒๓"],
    "other": ["ঠাকুর বাংলা ভাষা", "தமிழ் மொழி", "ქართული ენა", "Հայերեն լեզու", "አማርኛ ቋንቋ",
              "ᚠᛇᚻ᛫ᛒᛦᚦ", "ⲘⲉⲧⲢⲉⲙⲛ̀ⲭⲏⲙⲓ", "𐌰𐌱𐌲 gothic", "ᐃᓄᒃᑎᑐᑦ", "ꦧꦱꦗꦮ"],
}

SCRIPT_RANGES = {
    "latin": [(0x41, 0x5A), (0x61, 0x7A), (0xC0, 0xFF), (0x100, 0x17F)],
    "cyrillic": [(0x410, 0x44F)],
    "greek": [(0x391, 0x3A9), (0x3B1, 0x3C9)],
    "cjk": [(0x4E00, 0x9FA5), (0x3041, 0x3096), (0x30A1, 0x30FA), (0xAC00, 0xD7A3)],
    "arabic": [(0x621, 0x64A)],
    "hebrew": [(0x5D0, 0x5EA)],
    "devanagari": [(0x905, 0x939), (0x93E, 0x94D)],
    "thai": [(0xE01, 0xE2E), (0xE30, 0xE3A), (0xE40, 0xE4E)],
    "other": [(0x995, 0x9B9), (0xB95, 0xBB9), (0x10D0, 0x10F0), (0x531, 0x556), (0x1200, 0x1248)],
}

EMOJI = ["😀", "🤖", "👍", "👍🏽", "👩‍💻", "👨‍👩‍👧‍👦", "🏳️‍🌈", "🇯🇵", "🇺🇸🇫🇷", "#️⃣", "1️⃣", "❤️",
         "🧑🏿‍🚀", "🫠", "🦀", "🐍", "👁️‍🗨️", "🤷‍♀️", "🧔🏻‍♂️", "☺︎", "✌🏼", "🏴󠁧󠁢󠁳󠁣󠁴󠁿"]

COMBINING = ["e\u0301", "a\u0300\u0301\u0302\u0303", "n\u0303o", "Z\u0351\u0352\u0353a\u0354l\u0355g\u0356o",
             "\u0041\u030a", "\u00c5", "\u212b", "\u1e9b\u0323", "\u1100\u1161\u11a8", "\uac01",
             "\u0915\u094d\u0937", "q\u0307\u0323", "\u0301leading mark", "x\u20dd", "1\u20e3",
             "\u0627\u064b\u0651", "\u05e9\u05c1\u05b8", "\u0e01\u0e34\u0e48"]

CODE = [
    "def f(x):\n    return x * 2  # double\n",
    "for (int i = 0; i < n; ++i) {\n\tsum += a[i];\n}\n",
    "const x = {a: 1, 'b': [2, 3], \"c\": null};",
    "#include <vector>\nint main() { std::vector<int> v{1,2,3}; return v.size(); }",
    "SELECT id, name FROM users WHERE age >= 18 ORDER BY name DESC;",
    "<div class=\"x\"><p>Hello &amp; welcome</p></div>",
    "{\"key\": \"value\", \"list\": [1, 2.5, -3e10, true, false, null]}",
    "    if (a && b || !c) { x <<= 2; y >>= 3; z ^= ~w; }",
    "$ ls -la | grep '.py$' > out.txt 2>&1 && echo \"done\"",
    "fn main() -> Result<(), Box<dyn Error>> { println!(\"{:?}\", vec![1u8; 4]); Ok(()) }",
    "\\begin{equation} E = mc^2 \\int_0^\\infty e^{-x^2} dx \\end{equation}",
    "https://example.com/path?query=1&x=%20y#frag user@example.org",
    "x=1;y=2;;z=[[]];;;",
    "if __name__ == '__main__':\n\tmain()\r\n",
    "    \n        \n\t\t\n",
    "a\\nb\\tc\\\\d \\u00e9 \\x41",
]

PUNCT = ["...", "!!!", "?!", "—", "–", "…", "“quoted”", "‘single’", "«guillemets»", "「括弧」",
         "【注】", "、。", "·•", "§¶", "©®™", "€$£¥₹₿", "±×÷≠≤≥∞∑∫√", "←→↑↓⇒", "♠♥♦♣",
         "@#$%^&*()_+-=[]{}|;':\",./<>?`~", "''", "\"\"", "'s", "'S", "'ll", "'LL", "'Re", "’s",
         "don't", "I'M", "we've", "they'D", "ſ", "'ſ", "K", "ǅ"]

SPACES = [" ", "  ", "\t", "\n", "\r\n", "\r", "\u00a0", "\u2000", "\u2003", "\u2009", "\u200a",
          "\u3000", "\u205f", "\u202f", "\u1680", "\u0085", "\u2028", "\u2029", "\u200b", "\ufeff",
          "\u000b", "\u000c", "\u180e"]

UNICODE_DIGITS = ["٣", "۴", "३", "৫", "๖", "１２３", "²³", "½¾", "Ⅻ", "①②", "𝟙𝟚", "〇", "٫", "߀"]


def _random_word(rng: random.Random, script: str, length: int) -> str:
    ranges = SCRIPT_RANGES[script]
    out = []
    for _ in range(length):
        lo, hi = rng.choice(ranges)
        out.append(chr(rng.randint(lo, hi)))
    return "".join(out)


def _random_codepoint(rng: random.Random) -> str:
    while True:
        pick = rng.random()
        if pick < 0.5:
            cp = rng.randint(0x20, 0x7E)
        elif pick < 0.8:
            cp = rng.randint(0x80, 0xFFFF)
        else:
            cp = rng.randint(0x10000, 0x10FFFF)
        if not 0xD800 <= cp <= 0xDFFF:
            return chr(cp)


def _number(rng: random.Random, digits: int) -> str:
    first = str(rng.randint(1, 9)) if digits > 1 else str(rng.randint(0, 9))
    return first + "".join(str(rng.randint(0, 9)) for _ in range(digits - 1))


def _sentence(rng: random.Random, n: int) -> str:
    parts = []
    for _ in range(n):
        kind = rng.random()
        if kind < 0.35:
            parts.append(rng.choice(rng.choice(list(SCRIPT_SAMPLES.values()))))
        elif kind < 0.6:
            script = rng.choice(list(SCRIPT_RANGES))
            parts.append(_random_word(rng, script, rng.randint(1, 12)))
        elif kind < 0.7:
            parts.append(_number(rng, rng.randint(1, 12)))
        elif kind < 0.8:
            parts.append(rng.choice(PUNCT))
        elif kind < 0.87:
            parts.append(rng.choice(EMOJI))
        elif kind < 0.93:
            parts.append(rng.choice(COMBINING))
        else:
            parts.append(rng.choice(UNICODE_DIGITS))
        parts.append(rng.choice([" ", " ", " ", "", "\n", "  ", "\t", ", ", ". "]))
    return "".join(parts)


def corpus(added_tokens: list[str] | None = None) -> list[str]:
    """The corpus; `added_tokens` (e.g. a tokenizer's special tokens) are mixed into text."""
    rng = random.Random(SEED)
    out: list[str] = ["", " ", "  ", "\n", "\t", "\r\n", "a", "A", "0", ".", "'", "\u00a0", "▁",
                      " ▁ ", "▁▁x", "Ġ", "ĠĠ", "\u0120hello", "<0x0A>", "<unk>"]

    # Scripts: the samples alone, with prefixes/suffixes of spaces, and random words.
    for samples in SCRIPT_SAMPLES.values():
        for s in samples:
            out += [s, " " + s, s + " ", s.upper(), s.lower(), s.replace(" ", "")]
    for script in SCRIPT_RANGES:
        for _ in range(40):
            words = [_random_word(rng, script, rng.randint(1, 10)) for _ in range(rng.randint(1, 8))]
            out.append(rng.choice([" ", "", "  ", "\n"]).join(words))

    # Emoji, ZWJ sequences, combining marks, in isolation and in text.
    out += EMOJI + ["".join(EMOJI), " ".join(EMOJI)]
    out += COMBINING + ["".join(COMBINING), " ".join(COMBINING)]
    for _ in range(80):
        out.append(" ".join(rng.choice(EMOJI + COMBINING) + _random_word(rng, "latin", rng.randint(0, 5))
                            for _ in range(rng.randint(1, 6))))

    # Code.
    out += CODE + ["\n".join(CODE)]
    for _ in range(60):
        snippet = rng.choice(CODE)
        indent = rng.choice(["", "  ", "    ", "\t", "\t\t", "        "])
        out.append("\n".join(indent + line for line in snippet.split("\n")))

    # Numbers of every length, alone and in text, and non-ASCII digits.
    for digits in range(1, 81):
        n = _number(rng, digits)
        out += [n, " " + n, "x" + n + "y", n + "." + _number(rng, rng.randint(1, 6)),
                "-" + n, n[: max(1, digits // 2)] + "," + n[max(1, digits // 2):]]
    out += ["3.14159", "1e-10", "6.022E+23", "0x1F", "0b1010", "1,000,000", "1_000_000", "100%",
            "$19.99", "2024-06-01T12:34:56Z", "192.168.0.1", "v1.2.3-rc.4", "½ + ¼ = ¾"]
    out += UNICODE_DIGITS + ["".join(UNICODE_DIGITS)]
    for _ in range(60):
        out.append("".join(rng.choice(["1", "22", "333", "4444", "٣", "३", "１", "a", " ", ".", ","])
                           for _ in range(rng.randint(1, 30))))

    # Whitespace runs, tabs, newlines, Unicode spaces.
    for n in [1, 2, 3, 4, 5, 7, 8, 15, 16, 17, 31, 32, 33, 64, 100]:
        for ws in [" ", "\t", "\n", "\r\n", " \n", "\u3000"]:
            out += [ws * n, "a" + ws * n + "b", ws * n + "a", "a" + ws * n]
    for sp in SPACES:
        out += [sp, "a" + sp + "b", sp + "x", "x" + sp, sp * 3, "foo" + sp + sp + "bar"]
    for _ in range(80):
        out.append("".join(rng.choice(SPACES + ["a", "b", "1", "。", "é"]) for _ in range(rng.randint(1, 25))))

    # Text that begins with mixed whitespace (a prefix-space rule must not double a leading "▁"):
    # every pair of kinds, runs of 1 to 4, before a word and before a space-led word.
    leading = [" ", "\t", "\n", "\r\n", "\u00a0", "\u3000", "\u2009", "▁"]
    for first in leading:
        for second in leading:
            for n in [1, 2, 4]:
                out += [first * n + second + "x", first * n + second + " word", first + second * n]
    out += ["    \tx", "  \t  \n  x", " \t\u00a0\u3000 x", "\t    def f():\n        return 1"]

    # Punctuation, symbols and contractions.
    out += PUNCT + [" ".join(PUNCT), "".join(PUNCT)]
    for _ in range(60):
        out.append("".join(rng.choice(PUNCT) + rng.choice(["", " ", "a", "word"]) for _ in range(rng.randint(1, 8))))

    # Random mixtures.
    for _ in range(500):
        out.append(_sentence(rng, rng.randint(1, 25)))
    # Random code points anywhere in Unicode (planes, private use, controls, unassigned).
    for _ in range(200):
        out.append("".join(_random_codepoint(rng) for _ in range(rng.randint(1, 20))))

    # Very long words and texts.
    out += ["a" * 1000, "ab" * 2500, "z" * 20000, "9" * 5000, "中" * 3000, "😀" * 500,
            "é" * 2000, "e\u0301" * 1000, " " * 5000, "\n" * 2000, "\t" * 1000,
            "Supercalifragilisticexpialidocious" * 50, "-" * 3000, "=" * 1000 + ">",
            _random_word(rng, "cyrillic", 4000), _random_word(rng, "thai", 4000),
            _random_word(rng, "devanagari", 3000), _sentence(rng, 2000)]

    # Added/special tokens inside text, adjacent, with spaces, split, nested, repeated.
    tokens = list(added_tokens or [])
    for tok in tokens:
        out += [tok, " " + tok, tok + " ", "x" + tok + "y", tok + tok, f"a {tok} b", f"{tok}\n{tok}",
                tok[: len(tok) // 2], tok[len(tok) // 2:], "<" + tok + ">", tok.upper()]
    for _ in range(200 if tokens else 0):
        pieces = []
        for _ in range(rng.randint(1, 8)):
            pieces.append(rng.choice(tokens) if rng.random() < 0.4 else _sentence(rng, rng.randint(0, 3)))
            pieces.append(rng.choice(["", " ", "  ", "\n", "\t"]))
        out.append("".join(pieces))
    return out
