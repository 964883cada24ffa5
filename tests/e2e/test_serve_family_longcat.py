"""`latent serve` on a tiny LongCat-Flash (longcat_flash: two cached MLA rows per layer, identity
experts) carrying the deepseek_v3 tokenizer and its chat template: a chat completion over the
OpenAI API, streamed and not, equal to `latent generate` on the same prompt ids; a second,
longer request sharing its prefix is served from the prefix cache with the same output."""

from __future__ import annotations

import pytest

from conftest import latent_generate
from e2e_harness import MODEL_NAME, SERVER_FLAGS, TOKENIZER_DIR, LatentServer

MAX_TOKENS = 12


@pytest.fixture(scope="module")
def longcat_model(tiny_models):
    assert TOKENIZER_DIR.is_dir(), f"{TOKENIZER_DIR} is missing (../shared sits beside the repository)"
    return tiny_models.get("longcat_flash", "--tokenizer", str(TOKENIZER_DIR))


@pytest.fixture(scope="module")
def longcat_server(longcat_model, tmp_path_factory):
    srv = LatentServer(longcat_model, tmp_path_factory.mktemp("serve") / "serve.log", *SERVER_FLAGS)
    yield srv
    returncode = srv.stop()
    assert returncode == 0, f"latent serve exited {returncode}:\n{srv.log()}"


def test_chat_completion_equals_generate(longcat_server, longcat_model):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(longcat_model)
    client = longcat_server.client()
    # A system prompt of more than two 16-token blocks, so the follow-up below shares whole blocks.
    system = ("You are a terse assistant. You answer with one word, never explain anything, and "
              "never apologise for being brief, whatever the question is about.")
    messages = [{"role": "system", "content": system},
                {"role": "user", "content": "Name a prime number."}]
    resp = client.chat.completions.create(model=MODEL_NAME, messages=messages,
                                          max_completion_tokens=MAX_TOKENS, temperature=0,
                                          extra_body={"return_token_ids": True})
    text = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    prompt_ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    assert resp.model_extra["prompt_token_ids"] == prompt_ids
    choice = resp.choices[0]
    ids = choice.model_extra["token_ids"]
    assert ids == latent_generate(longcat_model, prompt_ids, MAX_TOKENS)
    assert choice.message.role == "assistant"
    assert choice.message.content == tokenizer.decode(ids, skip_special_tokens=True)
    assert resp.usage.prompt_tokens == len(prompt_ids) and resp.usage.completion_tokens == len(ids)

    chunks = list(client.chat.completions.create(model=MODEL_NAME, messages=messages,
                                                 max_completion_tokens=MAX_TOKENS, temperature=0,
                                                 stream=True))
    assert chunks[0].choices[0].delta.role == "assistant"
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == choice.message.content

    # The same conversation again, longer: its prompt's first blocks come from the prefix cache
    # (both latent rows of every layer), and the output is what a cold run gives.
    longer = messages + [{"role": "assistant", "content": choice.message.content},
                         {"role": "user", "content": "And another one?"}]
    again = client.chat.completions.create(model=MODEL_NAME, messages=longer,
                                           max_completion_tokens=MAX_TOKENS, temperature=0,
                                           extra_body={"return_token_ids": True})
    assert again.usage.prompt_tokens_details.cached_tokens > 0
    assert again.choices[0].model_extra["token_ids"] == latent_generate(
        longcat_model, again.model_extra["prompt_token_ids"], MAX_TOKENS)
