"""tie_word_embeddings against what the checkpoint stores, as transformers 5 decides it
(PreTrainedModel.tie_weights at from_pretrained): with the head and the embedding both stored and
different, it warns and does NOT tie them, so the stored lm_head is the head; an lm_head equal to
the embedding, or none, is tied (one tensor, counted once); an lm_head stored without the
embedding is tied too, the stored head serving as the embedding. latent follows the same rule
(Presence::kTiedHead in src/model/weight_table.h): logits and `latent info`'s parameter count
against transformers' on tiny random models (f32), a plain one and a Mistral 3 vision-language
wrapper (whose own tie_word_embeddings decides).
"""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
import torch
from safetensors.torch import load_file, save_file

from conftest import latent_logits, run_latent
from family_reference import assert_logits_match, info, load_reference, prompt

LENGTH = 7


def tied_copy(src, dst, head: str, text_config: bool = False):
    """A copy of `src` whose config.json says tie_word_embeddings true (at the top: for a wrapper
    that is the one transformers reads), its stored lm_head kept ("distinct"), replaced by the
    embedding's values ("copy") or removed ("absent"), or the embedding removed ("only")."""
    shutil.copytree(src, dst)
    config = json.loads((dst / "config.json").read_text())
    config["tie_word_embeddings"] = True
    (dst / "config.json").write_text(json.dumps(config))
    assert not (dst / "model.safetensors.index.json").exists()
    if head != "distinct":
        tensors = load_file(dst / "model.safetensors")
        if head == "copy":
            tensors["lm_head.weight"] = tensors["model.embed_tokens.weight"].clone()
        elif head == "only":
            del tensors["model.embed_tokens.weight"]
        else:
            del tensors["lm_head.weight"]
        save_file(tensors, dst / "model.safetensors", metadata={"format": "pt"})
    return dst


def reference_logits(reference, ids):
    with torch.no_grad():
        return reference(input_ids=torch.tensor([ids])).logits[0].float().numpy()


@pytest.mark.parametrize("head", ["distinct", "copy", "absent", "only"])
def test_tied_config_follows_the_stored_head(tiny_models, tmp_path, head):
    model = tied_copy(tiny_models.get("deepseek_v3"), tmp_path / "model", head)
    reference = load_reference(model)
    lm_head, embed = reference.lm_head.weight, reference.model.embed_tokens.weight
    # transformers unties only a stored head of its own.
    assert (lm_head.data_ptr() == embed.data_ptr()) == (head != "distinct")
    ids = prompt(reference.config.vocab_size, LENGTH)
    ref = reference_logits(reference, ids)
    ours = latent_logits(model, ids)
    assert_logits_match(ours, ref)
    if head == "distinct":
        # The embedding as the head gives other logits: the match above says which head ran.
        with torch.no_grad():
            hidden = reference.model(torch.tensor([ids])).last_hidden_state[0]
            embed_logits = (hidden @ embed.T).numpy()
        assert np.abs(embed_logits - ref).max() > 0.5
    assert info(model)["num_parameters"] == reference.num_parameters()


def test_tied_head_stored_alone_is_the_embedding(tiny_models, tmp_path):
    """Only lm_head stored: transformers loads it as the embedding too (one tensor). latent's
    logits, `latent info` and `--quantize int8` (whose int8 copy for the head is the embedding's)
    equal those of the same tensor stored as the embedding alone."""
    only = tied_copy(tiny_models.get("deepseek_v3"), tmp_path / "only", "only")
    head = load_file(only / "model.safetensors")["lm_head.weight"]
    reference = load_reference(only)
    assert torch.equal(reference.model.embed_tokens.weight, head)
    assert reference.lm_head.weight.data_ptr() == reference.model.embed_tokens.weight.data_ptr()

    # The same values stored as the embedding, without a head.
    embedded = tied_copy(tiny_models.get("deepseek_v3"), tmp_path / "embedded", "absent")
    tensors = load_file(embedded / "model.safetensors")
    tensors["model.embed_tokens.weight"] = head.clone()
    save_file(tensors, embedded / "model.safetensors", metadata={"format": "pt"})

    ids = prompt(reference.config.vocab_size, LENGTH)
    assert_logits_match(latent_logits(only, ids), reference_logits(reference, ids))
    for extra in [(), ("--quantize", "int8")]:
        ours, theirs = info(only, *extra), info(embedded, *extra)
        assert ours["num_parameters"] == theirs["num_parameters"] == reference.num_parameters()
        assert ours["weights"] == theirs["weights"]
        assert ours.get("unused_tensors", []) == []
    for mode in ["int8", "w8a8"]:
        args = ("--ids", ",".join(map(str, ids)), "--quantize", mode)
        ours = json.loads(run_latent("logits", "--model", str(only), *args).stdout)["logits"]
        theirs = json.loads(run_latent("logits", "--model", str(embedded), *args).stdout)["logits"]
        assert ours == theirs


@pytest.mark.parametrize("fault", ["shape", "dtype"])
def test_tied_head_stored_alone_is_named_in_errors(tiny_models, tmp_path, fault):
    """Only lm_head stored, of the wrong shape or dtype: latent refuses it under the name the
    checkpoint stores (transformers' lm_head.weight), not the embedding's it serves as."""
    model = tied_copy(tiny_models.get("deepseek_v3"), tmp_path / "model", "only")
    tensors = load_file(model / "model.safetensors")
    head = tensors["lm_head.weight"]
    tensors["lm_head.weight"] = head[1:].clone() if fault == "shape" else head.to(torch.int32)
    save_file(tensors, model / "model.safetensors", metadata={"format": "pt"})
    proc = run_latent("info", "--model", str(model), "--json", check=False)
    assert proc.returncode != 0
    vocab, hidden = head.shape
    wrong = (f"has shape [{vocab - 1}, {hidden}] but config.json implies [{vocab}, {hidden}]"
             if fault == "shape" else "has dtype I32 (expected F32, BF16 or F16)")
    assert (f"tensor 'lm_head.weight' (serving as 'model.embed_tokens.weight') {wrong}"
            in proc.stderr), proc.stderr


def test_tied_wrapper_config_loads_the_stored_head(tiny_models, tmp_path):
    """mistral3 around mistral4: the wrapper's tie_word_embeddings true, both stored and
    different (vl_tie_true in the checkpoint audit)."""
    model = tied_copy(tiny_models.get("mistral4_vl"), tmp_path / "model", "distinct")
    reference = load_reference(model, "Mistral3ForConditionalGeneration")
    assert (reference.lm_head.weight.data_ptr()
            != reference.model.language_model.embed_tokens.weight.data_ptr())
    ids = prompt(reference.config.get_text_config().vocab_size, LENGTH)
    assert_logits_match(latent_logits(model, ids), reference_logits(reference, ids))
