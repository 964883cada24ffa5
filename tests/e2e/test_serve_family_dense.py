"""`latent serve` on tiny Youtu, GLM-4.7-Flash (glm4_moe_lite) and MiniCPM3 models: one chat
completion each over the OpenAI API, with a real tokenizer and a chat template of the family's
kind (GLM's own template for glm4_moe_lite, ChatML for MiniCPM3, Qwen3's for Youtu); the prompt ids
equal transformers' rendering and tokenization, the tokens equal `latent generate` on them."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from conftest import latent_generate
from e2e_harness import MODEL_NAME, SERVER_FLAGS, LatentServer

SHARED = Path(__file__).resolve().parents[2].parent / "shared"
CHATML = ("{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + message['content']"
          " + '<|im_end|>' + '\\n' }}{% endfor %}{% if add_generation_prompt %}"
          "{{ '<|im_start|>assistant\\n' }}{% endif %}")
# family -> (tokenizer folder in ../shared/tokenizers, chat template: None for the tokenizer's own,
# else a file in ../shared/chat-templates or the template text)
FAMILIES = {
    "youtu": ("qwen3", None),
    "glm4_moe_lite": ("qwen3", SHARED / "chat-templates" / "glm-4.5.jinja"),
    "minicpm3": ("llama2", CHATML),
}
MAX_TOKENS = 8


def tokenizer_dir(root: Path, family: str) -> Path:
    tokenizer, template = FAMILIES[family]
    out = root / f"tokenizer-{family}"
    out.mkdir()
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copyfile(SHARED / "tokenizers" / tokenizer / name, out / name)
    if isinstance(template, Path):
        shutil.copyfile(template, out / "chat_template.jinja")
    elif template is not None:
        (out / "chat_template.jinja").write_text(template)
    return out


@pytest.mark.parametrize("family", list(FAMILIES))
def test_chat_completion(family, tiny_models, tmp_path):
    from transformers import AutoTokenizer

    assert SHARED.is_dir(), f"{SHARED} is missing (../shared sits beside the repository)"
    model_dir = tiny_models.get(family, "--tokenizer", str(tokenizer_dir(tmp_path, family)))
    hf_tokenizer = AutoTokenizer.from_pretrained(model_dir)
    messages = [{"role": "system", "content": "You are terse."},
                {"role": "user", "content": "Name a prime number."}]
    text = hf_tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    prompt_ids = hf_tokenizer(text, add_special_tokens=False)["input_ids"]

    server = LatentServer(model_dir, tmp_path / "serve.log", *SERVER_FLAGS)
    try:
        resp = server.client().chat.completions.create(
            model=MODEL_NAME, messages=messages, max_completion_tokens=MAX_TOKENS, temperature=0,
            extra_body={"return_token_ids": True, "ignore_eos": True})
    finally:
        assert server.stop() == 0, server.log()
    assert resp.model_extra["prompt_token_ids"] == prompt_ids
    choice = resp.choices[0]
    ids = choice.model_extra["token_ids"]
    assert len(ids) == MAX_TOKENS and choice.finish_reason == "length"
    assert ids == latent_generate(model_dir, prompt_ids, MAX_TOKENS, ignore_eos=True)
    assert choice.message.role == "assistant"
    assert choice.message.content == hf_tokenizer.decode(ids, skip_special_tokens=True)
    assert resp.usage.prompt_tokens == len(prompt_ids) and resp.usage.completion_tokens == MAX_TOKENS
