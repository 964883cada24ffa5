"""`latent generate` with text prompts and chat messages: the prompt it builds must be the one
transformers builds (tokenizer(text) / apply_chat_template), so its greedy output equals the
output for those token ids."""

from __future__ import annotations

import json

from transformers import AutoTokenizer

from conftest import REPO, latent_generate, run_latent

TOKENIZER = REPO.parent / "shared" / "tokenizers" / "deepseek_v3"


def test_text_and_chat_prompts_match_transformers(tiny_models, tmp_path):
    model_dir = tiny_models.get("deepseek_v3", "--tokenizer", str(TOKENIZER))
    hf = AutoTokenizer.from_pretrained(model_dir)
    texts = ["Hello, world!", "  leading spaces and ünïcödé 你好", "12345 + 678 = ?"]
    chats = [[{"role": "user", "content": "What is MLA?"}],
             [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"},
              {"role": "assistant", "content": "Hello."}, {"role": "user", "content": "Bye"}]]
    lines = [{"prompt": t, "max_tokens": 6, "ignore_eos": True} for t in texts]
    lines += [{"messages": m, "max_tokens": 6, "ignore_eos": True} for m in chats]
    path = tmp_path / "requests.jsonl"
    path.write_text("".join(json.dumps(l) + "\n" for l in lines))
    results = [json.loads(l) for l in run_latent("generate", "--model", str(model_dir), "--prompts",
                                                   str(path)).stdout.splitlines()]
    expected_prompts = [hf(t)["input_ids"] for t in texts]
    expected_prompts += [hf.apply_chat_template(m, add_generation_prompt=True, tokenize=True,
                                                return_dict=False) for m in chats]
    for result, prompt in zip(results, expected_prompts):
        if isinstance(prompt, dict):
            prompt = prompt["input_ids"]
        assert result["ids"] == latent_generate(model_dir, list(prompt), 6, ignore_eos=True)
        assert result["text"] == hf.decode(result["ids"], skip_special_tokens=True)
