#!/usr/bin/env python3
"""Make a tiny, randomly initialised MLA model (DeepSeek V2/V3, Kimi K2) as a HF checkpoint.

The model is built and saved by the installed `transformers` itself, so config.json and the
safetensors layout are exactly what transformers writes (the only hand edits are the kimi_k2
`model_type` and, with --fp8, the DeepSeek-style block-quantized weights plus their
`quantization_config`).

Weights are re-randomized after construction: transformers' default init (std 0.02, zero router
bias) gives near-uniform logits, near-uniform attention and expert choices decided by noise,
under which almost any inference bug goes unnoticed.

Example:
    tools/make_tiny_model.py --preset deepseek_v3 --out /tmp/tiny_v3
    tools/make_tiny_model.py --preset kimi_k2 --out /tmp/kimi --fp8 --max-shard-size 20KB
    tools/make_tiny_model.py --preset deepseek_v3 --out /tmp/v3tok --tokenizer /work/shared/tokenizers/deepseek_v3

Library use (tests put tools/ on sys.path and `import make_tiny_model`):
  * dequantize_fp8_checkpoint(src_dir, dst_dir): float32, non-quantized copy of an --fp8
    checkpoint, loadable by transformers (the reference for fp8 parity tests);
  * load_reference_model(ckpt_dir, dtype): loads an output with transformers, handling
    model_type kimi_k2 and the odd dims (experts_implementation="eager").

Prints a one-line JSON summary on stdout; notes and progress go to stderr; usage errors exit 2.
"""

from __future__ import annotations

import argparse
import copy
import json
import math
import re
import shutil
import sys
from pathlib import Path
from typing import Any

import torch

FP8_E4M3_MAX = 448.0  # largest finite float8_e4m3fn value
DEFAULT_FP8_BLOCK = 16  # DeepSeek ships 128x128 blocks; 16 gives several (partial) blocks on tiny dims
SAFETENSORS_METADATA = {"format": "pt"}
SINGLE_FILE = "model.safetensors"
INDEX_FILE = "model.safetensors.index.json"

# Tokenizer files copied by --tokenizer when present (LICENSE files are left behind on purpose:
# outputs are throwaway test fixtures).
TOKENIZER_FILES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "added_tokens.json",
    "tokenizer.model",
    "tiktoken.model",
    "vocab.json",
    "merges.txt",
    "chat_template.json",
    "chat_template.jinja",
)


# Saved model_type values transformers has no mapping for, loaded as DeepseekV3.
MODEL_TYPE_ALIASES = {"kimi_k2": "deepseek_v3"}
REFERENCE_EXPERTS_IMPLEMENTATION = "eager"


class UsageError(Exception):
    """A problem with the user's request; reported on stderr with exit code 2."""


# --------------------------------------------------------------------------------------------
# Presets
# --------------------------------------------------------------------------------------------
# Dims are deliberately odd / non-power-of-two and differ between presets and between fields
# (qk_nope != v_head, heads*v_head != hidden, ...) so that mixed-up dims or tiling assumptions
# fail loudly. qk_rope_head_dim must be even (rotary pairs). DeepseekV2Config validates that
# hidden_size % num_attention_heads == 0, V3 does not (MLA never uses hidden/heads).
#
# YaRN: max_position_embeddings == factor * original_max_position_embeddings, as in the real
# checkpoints; transformers warns (and uses the explicit factor) when they disagree.
#
# `num_mtp_layers` (saved as num_nextn_predict_layers) is 0 for V3-style presets: transformers
# builds no MTP module, so advertising one would describe weights the checkpoint lacks.

_V3_COMMON: dict[str, Any] = {
    "vocab_size": 257,
    "hidden_size": 61,
    "num_attention_heads": 5,
    "num_key_value_heads": 5,
    "intermediate_size": 74,
    "moe_intermediate_size": 22,
    "num_hidden_layers": 3,
    "first_k_dense_replace": 1,
    "q_lora_rank": 37,
    "kv_lora_rank": 27,
    "qk_nope_head_dim": 19,
    "qk_rope_head_dim": 8,
    "v_head_dim": 14,
    "n_routed_experts": 12,
    "num_experts_per_tok": 3,
    "n_shared_experts": 1,
    "n_group": 4,
    "topk_group": 2,
    "norm_topk_prob": True,
    "routed_scaling_factor": 2.5,
    # Not fields of DeepseekV3Config (its router is always noaux_tc/sigmoid), but present in
    # the real configs; transformers keeps and saves extra kwargs.
    "topk_method": "noaux_tc",
    "scoring_func": "sigmoid",
    "max_position_embeddings": 512,
    "rope_interleave": True,
    "rope_parameters": {
        "rope_type": "yarn",
        "rope_theta": 10000.0,
        "factor": 4.0,
        "original_max_position_embeddings": 128,
        "beta_fast": 32,
        "beta_slow": 1,
        "mscale": 1.0,
        "mscale_all_dim": 1.0,
    },
    "num_mtp_layers": 0,
    "bos_token_id": 0,
    "eos_token_id": 1,
    "tie_word_embeddings": False,
}

PRESETS: dict[str, dict[str, Any]] = {
    "deepseek_v2_lite": {
        "arch": "deepseek_v2",
        "help": "V2-Lite style: no q LoRA, greedy softmax routing, 2 shared experts, YaRN mscale 0.707",
        "config": {
            "vocab_size": 251,
            "hidden_size": 63,
            "num_attention_heads": 3,
            "num_key_value_heads": 3,
            "intermediate_size": 77,
            "moe_intermediate_size": 21,
            "num_hidden_layers": 3,
            "first_k_dense_replace": 1,
            "q_lora_rank": None,
            "kv_lora_rank": 26,  # V2: even, see check_v2_rope_dims
            "qk_nope_head_dim": 18,
            "qk_rope_head_dim": 8,
            "v_head_dim": 13,
            "n_routed_experts": 10,
            "num_experts_per_tok": 3,
            "n_shared_experts": 2,
            "topk_method": "greedy",
            "n_group": 1,
            "topk_group": 1,
            "norm_topk_prob": False,
            "routed_scaling_factor": 1.0,
            "scoring_func": "softmax",  # extra kwarg, as in the real config
            "max_position_embeddings": 512,
            "rope_parameters": {
                "rope_type": "yarn",
                "rope_theta": 10000.0,
                "factor": 4.0,
                "original_max_position_embeddings": 128,
                "beta_fast": 32,
                "beta_slow": 1,
                "mscale": 0.707,
                "mscale_all_dim": 0.707,
            },
            "bos_token_id": 0,
            "eos_token_id": 1,
            "tie_word_embeddings": False,
        },
    },
    "deepseek_v2": {
        "arch": "deepseek_v2",
        "help": "V2 style: q LoRA, group_limited_greedy (4 groups, top 2), scaling 1.5, default rope",
        "config": {
            "vocab_size": 253,
            "hidden_size": 60,
            "num_attention_heads": 4,
            "num_key_value_heads": 4,
            "intermediate_size": 72,
            "moe_intermediate_size": 19,
            "num_hidden_layers": 3,
            "first_k_dense_replace": 1,
            "q_lora_rank": 35,
            "kv_lora_rank": 22,
            "qk_nope_head_dim": 16,
            "qk_rope_head_dim": 8,
            "v_head_dim": 11,
            "n_routed_experts": 12,
            "num_experts_per_tok": 3,
            "n_shared_experts": 2,
            "topk_method": "group_limited_greedy",
            "n_group": 4,
            "topk_group": 2,
            "norm_topk_prob": False,
            "routed_scaling_factor": 1.5,
            "scoring_func": "softmax",
            "max_position_embeddings": 512,
            "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0},
            "bos_token_id": 0,
            "eos_token_id": 1,
            "tie_word_embeddings": False,
        },
    },
    "deepseek_v3": {
        "arch": "deepseek_v3",
        "help": "V3 style: q LoRA, noaux_tc sigmoid routing (4 groups, top 2), interleaved rope, YaRN",
        "config": _V3_COMMON,
    },
    "deepseek_v3_no_interleave": {
        "arch": "deepseek_v3",
        "help": "deepseek_v3 with rope_interleave false (rotate-half rope)",
        "config": {**_V3_COMMON, "rope_interleave": False},
    },
    "kimi_k2": {
        "arch": "deepseek_v3",
        "saved_model_type": "kimi_k2",
        "help": "Kimi K2 style: V3 architecture, 1 group, rope_theta 50000, YaRN factor 32, "
        "scaling 2.827; saved with model_type kimi_k2",
        "config": {
            **_V3_COMMON,
            "vocab_size": 263,
            "hidden_size": 58,
            "num_attention_heads": 3,
            "num_key_value_heads": 3,
            "intermediate_size": 70,
            "moe_intermediate_size": 18,
            "q_lora_rank": 33,
            "kv_lora_rank": 29,
            "qk_nope_head_dim": 13,
            "qk_rope_head_dim": 8,
            "v_head_dim": 10,
            "n_routed_experts": 11,  # prime: nothing may assume experts divide into groups > 1
            "num_experts_per_tok": 3,
            "n_shared_experts": 1,
            "n_group": 1,
            "topk_group": 1,
            "routed_scaling_factor": 2.827,
            "max_position_embeddings": 512,
            "rope_parameters": {
                "rope_type": "yarn",
                "rope_theta": 50000.0,
                "factor": 32.0,
                "original_max_position_embeddings": 16,
                "beta_fast": 1,
                "beta_slow": 1,
                "mscale": 1.0,
                "mscale_all_dim": 1.0,
            },
        },
    },
}


# DeepSeek sparse attention (DSA): V3-style MLA and routing plus the indexer. index_topk is small
# (8) so that prompts of tens of tokens really drop keys; 8 index heads make exact score ties
# (every head's relu at zero) rare. DSA configs have no rope_interleave (always interleaved) and
# no MTP field.
_DSA_COMMON: dict[str, Any] = {
    **{k: v for k, v in _V3_COMMON.items() if k not in ("rope_interleave", "num_mtp_layers")},
    "num_hidden_layers": 4,
    "index_topk": 8,
    "index_n_heads": 8,
    "index_head_dim": 16,
}
PRESETS["deepseek_v32"] = {
    "arch": "deepseek_v32",
    "help": "DeepSeek V3.2 style: V3 MLA/routing + DSA indexer (half-split rope), index_topk 8",
    "config": _DSA_COMMON,
}
PRESETS["glm_moe_dsa"] = {
    "arch": "glm_moe_dsa",
    "help": "GLM-5 style: DSA with interleaved indexer rope and IndexShare (full, shared, full, "
    "shared), 1 expert group, rms eps 1e-5",
    "config": {
        **_DSA_COMMON,
        "n_group": 1,
        "topk_group": 1,
        "rms_norm_eps": 1e-5,
        "indexer_types": ["full", "shared", "full", "shared"],
        "rope_parameters": {"rope_type": "default", "rope_theta": 1000000.0},
    },
}


# Families built by their own transformers classes (config class, CausalLM class), beyond the
# DeepSeek ones of build_config / build_model.
FAMILY_CLASSES: dict[str, tuple[str, str]] = {
    "axk1": ("AXK1Config", "AXK1ForCausalLM"),
    "mistral4": ("Mistral4Config", "Mistral4ForCausalLM"),
    "longcat_flash": ("LongcatFlashConfig", "LongcatFlashForCausalLM"),
    "axk2": ("AXK2Config", "AXK2ForCausalLM"),
    "dots3_note_text": ("Dots3NoteTextConfig", "Dots3NoteForCausalLM"),
    "kimi_linear": ("KimiLinearConfig", "KimiLinearForCausalLM"),
    "bailing_hybrid": ("BailingHybridConfig", "BailingHybridForCausalLM"),
}
# A.X-K1: V3 dims and router plus post_mlp_layernorm on sparse layers (no num_mtp_layers or
# first_k_dense_replace fields: AXK1Config has mlp_layer_types).
PRESETS["axk1"] = {
    "arch": "axk1",
    "help": "A.X-K1 style: V3 (noaux_tc, 4 groups) + post_mlp_layernorm on the MoE output, "
    "dense first layer, YaRN",
    "config": {
        **{k: v for k, v in _V3_COMMON.items()
           if k not in ("num_mtp_layers", "first_k_dense_replace", "topk_method", "scoring_func")},
        "vocab_size": 255,
        "hidden_size": 59,
        "intermediate_size": 71,
        "moe_intermediate_size": 21,
        "q_lora_rank": 31,
        "kv_lora_rank": 25,
        "qk_nope_head_dim": 17,
        "v_head_dim": 15,
        "mlp_layer_types": ["dense", "sparse", "sparse"],
    },
}
# Mistral Small 4: every layer MoE, softmax router with a top-2-sum group mask, Llama-4 query
# scaling (L0 = original_max_position_embeddings = 16, so prompts past 16 tokens scale), YaRN on
# the rope part of head_dim (partial_rotary_factor = rope / (nope + rope)).
PRESETS["mistral4"] = {
    "arch": "mistral4",
    "help": "Mistral Small 4 style: all MoE, softmax router with group mask (4 groups, top 2), "
    "Llama-4 query scaling past 16 tokens, YaRN partial rotary",
    "config": {
        "vocab_size": 261,
        "hidden_size": 57,
        "num_attention_heads": 4,
        "num_key_value_heads": 4,
        "intermediate_size": 66,
        "moe_intermediate_size": 20,
        "num_hidden_layers": 3,
        "q_lora_rank": 29,
        "kv_lora_rank": 23,
        "qk_nope_head_dim": 14,
        "qk_rope_head_dim": 10,
        "v_head_dim": 13,
        "n_routed_experts": 12,
        "num_experts_per_tok": 3,
        "n_shared_experts": 1,
        "n_group": 4,
        "topk_group": 2,
        "norm_topk_prob": True,
        "routed_scaling_factor": 1.7,
        "max_position_embeddings": 512,
        "rope_interleave": True,
        "rope_parameters": {
            "rope_type": "yarn",
            "rope_theta": 10000.0,
            "factor": 32.0,
            "original_max_position_embeddings": 16,
            "beta_fast": 32.0,
            "beta_slow": 1.0,
            "mscale": 1.0,
            "mscale_all_dim": 1.0,
            "llama_4_scaling_beta": 0.4,
            "partial_rotary_factor": 10 / 24,
        },
        "bos_token_id": 0,
        # A token this tiny model often emits, so that greedy runs do stop at EOS (the engine
        # property test needs early stops).
        "eos_token_id": 103,
        "pad_token_id": None,
        "tie_word_embeddings": False,
    },
}
# The same text model inside a Mistral 3 vision-language checkpoint (as Mistral Small 4 ships):
# config.json holds it under text_config, its tensors are language_model.*, plus a tiny vision
# tower and projector that a text engine ignores.
PRESETS["mistral4_vl"] = {**PRESETS["mistral4"], "wrapper": "mistral3",
                          "help": "mistral4 wrapped in a Mistral3 vision-language checkpoint "
                          "(text_config, language_model.* tensors, tiny vision tower)"}


def build_wrapper(text_model, seed: int):
    """A Mistral3ForConditionalGeneration around `text_model` (its weights copied in), with a
    tiny default-initialised Pixtral vision tower."""
    from transformers import Mistral3Config, Mistral3ForConditionalGeneration, PixtralVisionConfig

    vision = PixtralVisionConfig(hidden_size=16, intermediate_size=24, num_hidden_layers=1,
                                 num_attention_heads=2, head_dim=8, image_size=32, patch_size=16)
    config = Mistral3Config(vision_config=vision, text_config=text_model.config,
                            image_token_index=text_model.config.vocab_size - 1, spatial_merge_size=1,
                            tie_word_embeddings=text_model.config.tie_word_embeddings)
    torch.manual_seed(seed)
    wrapped = Mistral3ForConditionalGeneration(config)
    wrapped.model.language_model.load_state_dict(text_model.model.state_dict())
    wrapped.lm_head.load_state_dict(text_model.lm_head.state_dict())
    wrapped.set_experts_implementation(REFERENCE_EXPERTS_IMPLEMENTATION)
    return wrapped.eval()
# LongCat-Flash: per layer two MLA sublayers, two dense MLPs and a shortcut MoE whose router scores
# 7 routed plus 3 identity ("zero") experts (top 3: tokens often pick identity experts, and the
# correction bias changes some choices); the LoRA scales sqrt(D / q_lora) and sqrt(D / kv_lora)
# are far from 1 at these dims. Saved with LongCat's own key names (num_layers, ffn_hidden_size,
# expert_ffn_hidden_size, moe_topk, zero_expert_num).
PRESETS["longcat_flash"] = {
    "arch": "longcat_flash",
    "help": "LongCat-Flash style: 2 MLA + 2 MLP + shortcut MoE per layer, 7 routed + 3 identity "
    "experts (top 3), routed_scaling_factor 1.7, LoRA scales, rms eps 1e-5",
    "config": {
        # 263: with seed 0 this model sometimes emits EOS (id 1) within a few greedy tokens, which
        # the engine property test's workload needs (early stops as well as full lengths).
        "vocab_size": 263,
        "hidden_size": 62,
        "num_attention_heads": 3,
        "ffn_hidden_size": 70,
        "expert_ffn_hidden_size": 20,
        "num_layers": 2,
        "q_lora_rank": 30,
        "kv_lora_rank": 21,
        "qk_nope_head_dim": 14,
        "qk_rope_head_dim": 8,
        "head_dim": 8,  # the rotary dim of transformers' LongcatFlashRotaryEmbedding: must be qk_rope_head_dim
        "v_head_dim": 12,
        "n_routed_experts": 7,
        "zero_expert_num": 3,
        "moe_topk": 3,
        "routed_scaling_factor": 1.7,
        "max_position_embeddings": 512,
        "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0},
        "rms_norm_eps": 1e-5,
        "bos_token_id": 0,
        "eos_token_id": 1,
        "tie_word_embeddings": False,
    },
}


# A.X-K2: V3.2 DSA (index_topk 8 drops keys past 8 tokens) with the fused query/output-gate
# projection and gated RMSNorms (rank 5), a dense first layer, and the grouped router of the larger
# releases (4 groups, top 2: dropped experts score 0, which beats a kept expert whose biased score
# is negative). The parity test also runs it without groups (A.X-K2-Light's n_group null).
PRESETS["axk2"] = {
    "arch": "axk2",
    "help": "A.X-K2 style: V3.2 DSA (index_topk 8) + fused query/output gate + gated RMSNorms "
    "(rank 5), sigmoid router with 4 groups (top 2), dense first layer, YaRN",
    "config": {
        "vocab_size": 258,
        "hidden_size": 61,
        "num_attention_heads": 3,
        "num_key_value_heads": 3,
        "intermediate_size": 69,
        "moe_intermediate_size": 19,
        "num_hidden_layers": 4,
        "mlp_layer_types": ["dense", "sparse", "sparse", "sparse"],
        "q_lora_rank": 27,
        "kv_lora_rank": 23,
        "qk_nope_head_dim": 14,
        "qk_rope_head_dim": 8,
        "v_head_dim": 11,
        "n_routed_experts": 12,
        "num_experts_per_tok": 3,
        "n_shared_experts": 1,
        "n_group": 4,
        "topk_group": 2,
        "norm_topk_prob": True,
        "routed_scaling_factor": 2.5,
        "gated_norm_rank": 5,
        "index_topk": 8,
        "index_n_heads": 8,
        "index_head_dim": 16,
        "max_position_embeddings": 512,
        "rope_parameters": _V3_COMMON["rope_parameters"],
        "bos_token_id": 0,
        # A token this tiny model often emits, so that greedy runs do stop at EOS (the engine
        # property test needs early stops).
        "eos_token_id": 73,
        "tie_word_embeddings": False,
    },
}


# Mistral Large 4 (text model mistral_large4_text inside a mistral_large4 vision-language
# checkpoint, saved with Mistral's native tensor names at the root). Six layers cover every layer
# kind: rope and NoPE layers (3 and 5 have no rotary part), KV sharing (layer 1 reads layer 0's
# latent, 4 reads 2's, 5 reads 3's: the latest storing layer of its rope kind), full and shared
# indexers (3 and 4 reuse the selection of 2), so the layers cache [latent+index, index,
# latent+index, NoPE latent, nothing, index]. LeRoPE alpha and the log-position query scales are
# drawn away from their neutral init (rerandomize); YaRN over 32 original positions, so long
# prompts extrapolate; logit softcap 5, well inside the logits' range, so tanh visibly bends them.
PRESETS["mistral_large4"] = {
    "arch": "mistral_large4_text",
    "wrapper": "mistral_large4",
    "help": "Mistral Large 4 style: NoPE layers, KV sharing, full/shared DSA indexers (topk 8), "
    "LeRoPE under YaRN, log-position query scaling, softcap 5, softmax group-top2 router",
    "config": {
        "vocab_size": 263,
        "hidden_size": 58,
        "num_attention_heads": 4,
        "num_key_value_heads": 4,
        "intermediate_size": 68,
        "moe_intermediate_size": 20,
        "num_hidden_layers": 6,
        "first_k_dense_replace": 1,
        "kv_lora_rank": 26,
        "qk_nope_head_dim": 14,
        "qk_rope_head_dim": 8,
        "v_head_dim": 12,
        "n_routed_experts": 8,
        "num_experts_per_tok": 2,
        "n_shared_experts": 1,
        "n_group": 2,
        "topk_group": 1,
        "routed_scaling_factor": 1.5,
        "index_topk": 8,
        # 16 heads: with few, a key's relu'd scores are often all 0, and ties at the top-k
        # boundary are broken by torch's implementation, not by any rule latent could follow.
        "index_n_heads": 16,
        "index_head_dim": 16,
        "no_rope_layers": [1, 1, 1, 0, 1, 0],
        "kv_source_layers": [0, 0, 2, 3, 2, 3],
        "indexer_types": ["full", "full", "full", "shared", "shared", "full"],
        "final_logit_softcapping": 5.0,
        "max_position_embeddings": 512,
        "rope_parameters": {
            "rope_type": "yarn",
            "rope_theta": 10000.0,
            "factor": 16.0,
            "original_max_position_embeddings": 32,
            "beta_fast": 32.0,
            "beta_slow": 1.0,
            "attention_factor": 1.0,
        },
        "bos_token_id": 0,
        # A token this tiny model emits now and then, so that greedy runs stop at EOS early in
        # the engine property test's workload (and never only on its last token).
        "eos_token_id": 33,
        "pad_token_id": None,
        "tie_word_embeddings": False,
    },
}


# dots3-note (the text model, dots3_note_text): six layers, DSA on 0, 1 and 5 (l < 2 or l % 4 == 1)
# with the top-level MLA dims, sliding-window attention of 16 tokens on 2-4 with their own shape
# (3 heads, q_lora 28, kv_lora 26, dims 16/6/9: a latent row of 32 values against the DSA layers'
# 28) and rope theta; 3 x window is 48 tokens. index_topk 8 with 16 indexer heads (see
# mistral_large4's note on ties); a dense first layer, then the V3.2 router with 1 group.
PRESETS["dots3_note"] = {
    "arch": "dots3_note_text",
    "help": "dots3-note style: DSA layers (topk 8) and sliding-window layers (window 16) with "
    "their own MLA shapes and rope thetas, q/latent LoRA scalings, k_rope norm, per-head gate",
    "config": {
        "vocab_size": 257,
        "hidden_size": 56,
        "num_attention_heads": 4,
        "num_key_value_heads": 4,
        "intermediate_size": 64,
        "moe_intermediate_size": 20,
        "shared_experts_intermediate_size": 18,
        "num_hidden_layers": 6,
        "q_lora_rank": 24,
        "kv_lora_rank": 20,
        "qk_nope_head_dim": 12,
        "qk_rope_head_dim": 8,
        "v_head_dim": 10,
        "head_dim": 20,
        "swa_num_attention_heads": 3,
        "swa_num_key_value_heads": 3,
        "swa_q_lora_rank": 28,
        "swa_kv_lora_rank": 26,
        "swa_head_dim": 22,
        "swa_qk_nope_head_dim": 16,
        "swa_v_head_dim": 9,
        "swa_rope_theta": 500.0,
        "rope_theta": 10000.0,
        "sliding_window": 16,
        "n_routed_experts": 8,
        "num_experts_per_tok": 2,
        "n_shared_experts": 1,
        "routed_scaling_factor": 1.5,
        "index_topk": 8,
        "index_n_heads": 16,
        "index_head_dim": 16,
        "max_position_embeddings": 512,
        "bos_token_id": 0,
        # A token this tiny model emits now and then (never only as the last of a short
        # continuation), so that the engine property test's greedy runs stop at EOS early.
        "eos_token_id": 75,
        "pad_token_id": None,
        "tie_word_embeddings": False,
    },
}


# Kimi Linear: KDA linear-attention layers (1, 2, 4, 5 in the checkpoint's 1-indexed numbering)
# around one NoPE MLA layer (3), DeepSeek V3's sigmoid router with 1 group, dense first layer.
# The KDA decay (A_log, dt_bias) is drawn as FLA initialises it (rerandomize), so the state
# remembers a few to a few dozen tokens.
PRESETS["kimi_linear"] = {
    "arch": "kimi_linear",
    "help": "Kimi Linear style: 4 KDA layers (4 heads of 12, conv 4) + 1 NoPE MLA layer, sigmoid "
    "router (8 experts, top 2, 1 shared), dense first layer",
    "config": {
        "vocab_size": 259,
        "hidden_size": 52,
        "num_attention_heads": 4,
        "num_key_value_heads": 4,
        "intermediate_size": 70,
        "moe_intermediate_size": 21,
        "num_hidden_layers": 5,
        "first_k_dense_replace": 1,
        "q_lora_rank": None,
        "kv_lora_rank": 26,
        "qk_nope_head_dim": 14,
        "qk_rope_head_dim": 8,
        "v_head_dim": 12,
        "num_local_experts": 8,
        "num_experts_per_tok": 2,
        "n_shared_experts": 1,
        "routed_scaling_factor": 2.446,
        "linear_attn_config": {"head_dim": 12, "num_heads": 4, "short_conv_kernel_size": 4,
                               "full_attn_layers": [3], "kda_layers": [1, 2, 4, 5]},
        "max_position_embeddings": 512,
        "bos_token_id": 0,
        # A token this tiny model emits now and then, so that greedy runs stop at EOS early in
        # the engine property test's workload.
        "eos_token_id": 225,
        "pad_token_id": None,
        "tie_word_embeddings": False,
    },
}


# GLM-5-Next (text model glm5_next_text inside a glm5_next vision-language checkpoint): KDA layers
# 0-2 (4 heads of 12, conv 4, bounded forget gate) and DSA-MLA layers 3 and 4 (all NoPE; 4 runs
# no indexer of its own and reuses 3's selection), mHC with 4 streams (Sinkhorn-mixed), the KPool
# indexer with pools of 16 and index_topk 32 (2 pools: prompts past 48 tokens select sparsely,
# 300 tokens hold 18 complete pools), every SwiGLU clamped at 0.8 (inside the pre-activations'
# range, so the clamp bites), a dense first layer. The pool softmax's gate and positional term
# get gains that make the pool keys visibly differ from a plain mean.
PRESETS["glm5_next"] = {
    "arch": "glm5_next_text",
    "wrapper": "glm5_next",
    "help": "GLM-5-Next style: 3 KDA + 2 NoPE DSA-MLA layers (one shared), mHC 4 streams "
    "(Sinkhorn), KPool indexer (pools of 16, topk 32), SwiGLU clamp 0.8 everywhere",
    "config": {
        "vocab_size": 261,
        "hidden_size": 48,
        "num_attention_heads": 4,
        "num_key_value_heads": 4,
        "intermediate_size": 64,
        "moe_intermediate_size": 20,
        "num_hidden_layers": 5,
        "mlp_layer_types": ["dense", "sparse", "sparse", "sparse", "sparse"],
        "layer_types": ["linear_attention", "linear_attention", "linear_attention",
                        "indexed_attention", "indexed_attention"],
        "indexer_types": ["full", "full", "full", "full", "shared"],
        "q_lora_rank": 24,
        "kv_lora_rank": 20,
        "qk_nope_head_dim": 16,
        "qk_rope_head_dim": 0,
        "v_head_dim": 12,
        "n_routed_experts": 8,
        "num_experts_per_tok": 2,
        "n_shared_experts": 1,
        "routed_scaling_factor": 2.5,
        "index_topk": 32,
        "index_kpool": 16,
        "index_n_heads": 16,
        "index_head_dim": 16,
        "linear_head_dim": 12,
        "linear_num_heads": 4,
        "linear_conv_kernel_dim": 4,
        "linear_lower_bound": -5.0,
        "hc_mult": 4,
        "hc_sinkhorn_iters": 20,
        "swiglu_limit": 0.8,
        "rms_norm_eps": 1e-5,
        "max_position_embeddings": 512,
        "bos_token_id": 0,
        # A token this tiny model emits now and then, so that greedy runs stop at EOS early in
        # the engine property test's workload.
        "eos_token_id": 222,
        "pad_token_id": None,
        "tie_word_embeddings": False,
    },
}


# Ling 3 (bailing_hybrid): KDA layers with full-rank forget and output gates (safe gate, bound -5)
# and gated MLA layers (per-head sigmoid gate), full attention at (l + 1) % 3 == 0 (layers 2 and
# 5), dense first two layers, DeepSeek V3's sigmoid router over 2 groups. The KDA head (head_dim
# 10) differs from qk_rope_head_dim (8): transformers saves head_dim as the rope dim and the KDA
# head as linear_head_dim.
PRESETS["bailing_hybrid"] = {
    "arch": "bailing_hybrid",
    "help": "Ling 3 style: 4 KDA layers (4 heads of 10, safe full-rank gates) + 2 MLA layers with "
    "a per-head output gate, sigmoid router (8 experts in 2 groups, top 2, 1 shared), 2 dense layers",
    "config": {
        "vocab_size": 261,
        "hidden_size": 54,
        "num_attention_heads": 4,
        "num_key_value_heads": 4,
        "intermediate_size": 66,
        "moe_intermediate_size": 19,
        "num_hidden_layers": 6,
        "layer_group_size": 3,
        "first_k_dense_replace": 2,
        "q_lora_rank": None,
        "kv_lora_rank": 22,
        "qk_nope_head_dim": 14,
        "qk_rope_head_dim": 8,
        "v_head_dim": 12,
        "head_dim": 10,
        "short_conv_kernel_size": 4,
        "kda_safe_gate": True,
        "kda_lower_bound": -5.0,
        "num_local_experts": 8,
        "num_experts_per_tok": 2,
        "n_group": 2,
        "topk_group": 1,
        "n_shared_experts": 1,
        "routed_scaling_factor": 2.5,
        "rope_theta": 10000.0,
        "max_position_embeddings": 512,
        "bos_token_id": 0,
        # A token this tiny model emits now and then (in 11 of 50 random 10-token greedy runs,
        # never first), so that greedy runs stop at EOS early in the engine property workload.
        "eos_token_id": 81,
        "pad_token_id": None,
        "tie_word_embeddings": False,
    },
}


def build_glm5_next(text_config, seed: int, dtype: torch.dtype):
    """A Glm5NextForConditionalGeneration (the only class transformers has for it) around
    `text_config`, with a tiny default-initialised vision tower; the language model and LM head
    are re-randomized as every preset's are."""
    from transformers import Glm5NextConfig, Glm5NextForConditionalGeneration

    vision = {"depth": 1, "hidden_size": 16, "num_heads": 2, "intermediate_size": 24,
              "out_hidden_size": text_config.hidden_size, "projection_intermediate_size": 32,
              "patch_size": 14, "image_size": 28}
    config = Glm5NextConfig(text_config=text_config.to_dict(), vision_config=vision,
                            tie_word_embeddings=text_config.tie_word_embeddings)
    torch.manual_seed(seed)
    model = Glm5NextForConditionalGeneration(config)
    text = torch.nn.Module()  # the text model's parameters under model.* / lm_head.*
    text.model = model.model.language_model
    text.lm_head = model.lm_head
    text.config = config.text_config
    rerandomize(text, seed)
    if dtype != torch.float32:
        low = Glm5NextForConditionalGeneration._from_config(config, dtype=dtype)
        low.load_state_dict(model.state_dict())
        model = low
    model.set_experts_implementation(REFERENCE_EXPERTS_IMPLEMENTATION)
    return model.eval()


def build_mistral_large4(text_config, seed: int, dtype: torch.dtype):
    """A MistralLarge4ForConditionalGeneration (the only class transformers has for it) around
    `text_config`, with a tiny default-initialised Pixtral vision tower; the language model and
    LM head are re-randomized as every preset's are."""
    from transformers import MistralLarge4Config, MistralLarge4ForConditionalGeneration

    vision = {"model_type": "pixtral", "hidden_size": 16, "intermediate_size": 24,
              "num_hidden_layers": 1, "num_attention_heads": 2, "head_dim": 8, "image_size": 32,
              "patch_size": 16}
    config = MistralLarge4Config(text_config=text_config.to_dict(), vision_config=vision,
                                 image_token_index=text_config.vocab_size - 1, spatial_merge_size=1,
                                 tie_word_embeddings=text_config.tie_word_embeddings)
    torch.manual_seed(seed)
    model = MistralLarge4ForConditionalGeneration(config)
    text = torch.nn.Module()  # the text model's parameters under model.* / lm_head.*
    text.model = model.model.language_model
    text.lm_head = model.lm_head
    text.config = config.text_config
    rerandomize(text, seed)
    if dtype != torch.float32:
        low = MistralLarge4ForConditionalGeneration._from_config(config, dtype=dtype)
        low.load_state_dict(model.state_dict())
        model = low
    model.set_experts_implementation(REFERENCE_EXPERTS_IMPLEMENTATION)
    return model.eval()


# Dense and GLM-Lite MLA families (transformers' own config and model classes, found by
# model_type). Youtu: V3 attention, every layer a dense SwiGLU MLP, tied embeddings.
PRESETS["youtu"] = {
    "arch": "youtu",
    "help": "Youtu-LLM style: V3 attention (q LoRA, interleaved rope), dense MLP everywhere, tied "
    "embeddings, YaRN",
    "config": {
        "vocab_size": 259,
        "hidden_size": 62,
        "num_attention_heads": 4,
        "num_key_value_heads": 4,
        "intermediate_size": 70,
        "num_hidden_layers": 3,
        "q_lora_rank": 33,
        "kv_lora_rank": 25,
        "qk_nope_head_dim": 17,
        "qk_rope_head_dim": 10,
        "v_head_dim": 13,
        "max_position_embeddings": 512,
        "rope_interleave": True,
        "rope_parameters": {
            "rope_type": "yarn",
            "rope_theta": 50000.0,
            "factor": 4.0,
            "original_max_position_embeddings": 128,
            "beta_fast": 32,
            "beta_slow": 1,
            "mscale": 1.0,
            "mscale_all_dim": 1.0,
        },
        "bos_token_id": 0,
        "eos_token_id": 1,
        "tie_word_embeddings": True,
    },
}
# GLM-4.7-Flash style: dense and MoE layers in the order mlp_layer_types gives (not only a dense
# prefix), V3's noaux_tc router, rms eps 1e-5. partial_rotary_factor stays 1.0: smaller values
# crash transformers' MLA rope (its cos/sin no longer match the rotary part).
PRESETS["glm4_moe_lite"] = {
    "arch": "glm4_moe_lite",
    "help": "GLM-4.7-Flash style: mlp_layer_types (dense, sparse, dense, sparse), noaux_tc "
    "(2 groups, top 1), scaling 1.8, rms eps 1e-5, rope theta 1e6",
    "config": {
        "vocab_size": 261,
        "hidden_size": 64,
        "num_attention_heads": 4,
        "num_key_value_heads": 4,
        "intermediate_size": 80,
        "moe_intermediate_size": 20,
        "num_hidden_layers": 4,
        "mlp_layer_types": ["dense", "sparse", "dense", "sparse"],
        "q_lora_rank": 36,
        "kv_lora_rank": 28,
        "qk_nope_head_dim": 18,
        "qk_rope_head_dim": 8,
        "v_head_dim": 15,
        "n_routed_experts": 12,
        "num_experts_per_tok": 3,
        "n_shared_experts": 1,
        "n_group": 2,
        "topk_group": 1,
        "norm_topk_prob": True,
        "routed_scaling_factor": 1.8,
        "rms_norm_eps": 1e-5,
        "max_position_embeddings": 512,
        "rope_interleave": True,
        "rope_parameters": {"rope_type": "default", "rope_theta": 1000000.0, "partial_rotary_factor": 1.0},
        "bos_token_id": 0,
        "eos_token_id": 1,
        "tie_word_embeddings": False,
    },
}
# MiniCPM3 style: rotate-half rope with LongRoPE. original_max_position_embeddings is 32, so
# prompts longer than that switch to the long factors; max_position_embeddings 512 makes the
# implied factor 16 and the cos/sin attention factor sqrt(1 + ln 16 / ln 32). The muP scalings
# (scale_emb, scale_depth / sqrt(L), hidden / (hidden_size / dim_model_base)) are all non-trivial:
# the embedding is drawn 1/scale_emb smaller (rerandomize) so that the scaled one does not drown
# the attention, and hidden_size / dim_model_base is 1/10 (the real 2560 / 256 divides by 10).
PRESETS["minicpm3"] = {
    "arch": "minicpm3",
    "help": "MiniCPM3 style: rotate-half LongRoPE (original 32 positions), scale_emb 12, "
    "scale_depth 1.4, dim_model_base 640, dense MLP, tied embeddings, rms eps 1e-5",
    "config": {
        "vocab_size": 251,  # with seed 0, greedy decoding meets EOS (1) early in the engine property workload
        "hidden_size": 64,
        "num_attention_heads": 4,
        "num_key_value_heads": 4,
        "intermediate_size": 76,
        "num_hidden_layers": 3,
        "q_lora_rank": 40,
        "kv_lora_rank": 24,
        "qk_nope_head_dim": 16,
        "qk_rope_head_dim": 8,
        "v_head_dim": 15,
        "max_position_embeddings": 512,
        "rms_norm_eps": 1e-5,
        "scale_emb": 12,
        "scale_depth": 1.4,
        "dim_model_base": 640,
        "rope_parameters": {
            "rope_type": "longrope",
            "rope_theta": 10000.0,
            "short_factor": [1.0, 1.25, 1.1, 1.6],
            "long_factor": [1.0, 1.9, 3.7, 6.5],
            "original_max_position_embeddings": 32,
        },
        "bos_token_id": 0,
        "eos_token_id": 1,
        "tie_word_embeddings": True,
    },
}


# Hy4 (hy_v4): every layer DSA (index_topk 8; layers 0 and 1 run their own indexer, 2 and 3
# reuse layer 1's top-k), its indexer rotating the LAST rope dims of a 16-wide head; 3 hyper-
# connection streams (fp32 pre/post mixing, a sigmoid-weighted head); a learned sink logit per
# head; a per-channel output gate from gate_proj(x); rotate-half rope under YaRN with mscale;
# routed experts with a SwiGLU clamped at 0.8 (inside the pre-activations' range, so the clamp
# bites); a dense first layer; an f32 lm_head.
PRESETS["hy_v4"] = {
    "arch": "hy_v4",
    "help": "Hy4 style: 3 hyper-connection streams, attention sinks, per-channel output gate, "
    "full/shared DSA (topk 8, indexer rope on the last dims), rotate-half YaRN, SwiGLU clamp 0.8",
    "config": {
        "vocab_size": 257,
        "hidden_size": 60,
        "num_attention_heads": 4,
        "num_key_value_heads": 4,
        "intermediate_size": 72,
        "moe_intermediate_size": 18,
        "num_hidden_layers": 4,
        "q_lora_rank": 28,
        "kv_lora_rank": 24,
        "qk_nope_head_dim": 14,
        "qk_rope_head_dim": 8,
        "v_head_dim": 12,
        "n_routed_experts": 8,
        "num_experts_per_tok": 2,
        "n_shared_experts": 1,
        "n_group": 1,
        "topk_group": 1,
        "norm_topk_prob": True,
        "routed_scaling_factor": 1.7,
        "index_topk": 8,
        "index_n_heads": 16,
        "index_head_dim": 16,
        "hc_mult": 3,
        "hc_magnitude": 2.0,
        "hc_eps": 1e-6,
        "swiglu_limit": 0.8,
        "rms_norm_eps": 1e-5,
        "max_position_embeddings": 512,
        "rope_parameters": {
            "rope_type": "yarn",
            "rope_theta": 10000.0,
            "factor": 4.0,
            "original_max_position_embeddings": 128,
            "beta_fast": 32,
            "beta_slow": 1,
            "mscale": 1.0,
            "mscale_all_dim": 1.0,
        },
        "bos_token_id": 0,
        "eos_token_id": 1,
        "pad_token_id": None,
        "tie_word_embeddings": False,
    },
}


def preset_listing() -> str:
    lines = []
    for name, preset in PRESETS.items():
        c = preset["config"]
        dims = (
            f"hidden={c['hidden_size']} heads={c['num_attention_heads']} q_lora={c.get('q_lora_rank')} "
            f"kv_lora={c['kv_lora_rank']} nope/rope/v={c['qk_nope_head_dim']}/{c['qk_rope_head_dim']}/"
            f"{c['v_head_dim']} experts={c.get('n_routed_experts', 0)}x{c.get('num_experts_per_tok', c.get('moe_topk'))} "
            f"shared={c.get('n_shared_experts', 0)} layers={c.get('num_hidden_layers', c.get('num_layers'))} "
            f"vocab={c['vocab_size']}"
        )
        lines.append(f"{name:28s} {preset['help']}\n{'':28s} {dims}")
    return "\n".join(lines)


# --------------------------------------------------------------------------------------------
# Config assembly
# --------------------------------------------------------------------------------------------


def parse_config_json(text: str | None) -> dict[str, Any]:
    if text is None:
        return {}
    try:
        overrides = json.loads(text)
    except json.JSONDecodeError as e:
        raise UsageError(f"--config-json is not valid JSON: {e}") from e
    if not isinstance(overrides, dict):
        raise UsageError("--config-json must be a JSON object")
    for key, value in overrides.items():
        # Counts and sizes: transformers takes a negative one and fails later building the model
        # (a traceback), so it is refused here with its name.
        is_count = key.startswith(("num_", "n_")) or key.endswith(
            ("_size", "_dim", "_layers", "_heads", "_experts", "_topk")
        )
        if is_count and isinstance(value, int) and not isinstance(value, bool) and value < 0:
            raise UsageError(f"--config-json: {key} must not be negative, got {value}")
    return overrides


def check_max_shard_size(value: str | None) -> None:
    """save_pretrained's size syntax ("20KB", "1GiB"), checked before anything is written."""
    if value is None:
        return
    from transformers.utils.hub import convert_file_size_to_int

    try:
        size = convert_file_size_to_int(value)
    except ValueError:
        size = 0
    if size <= 0:
        raise UsageError(f"--max-shard-size {value!r}: expected a positive size such as 20KB, "
                         "5MB or 1GiB")


def check_out_dir(out: Path) -> None:
    if out.exists() and not out.is_dir():
        raise UsageError(f"--out {out}: exists and is not a directory")


def read_tokenizer_info(tok_dir: Path) -> dict[str, Any]:
    """Highest token id (base vocab + added tokens) and the bos/eos ids named by tokenizer_config."""
    tok_json = tok_dir / "tokenizer.json"
    if not tok_json.is_file():
        raise UsageError(f"--tokenizer: {tok_json} not found")
    tok = json.loads(tok_json.read_text(encoding="utf-8"))
    vocab = tok.get("model", {}).get("vocab") or {}
    # BPE/WordPiece store {token: id}; Unigram stores [[token, score], ...] indexed by position.
    if isinstance(vocab, dict):
        token_to_id = dict(vocab)
    else:
        token_to_id = {entry[0]: i for i, entry in enumerate(vocab)}
    for added in tok.get("added_tokens", []):
        token_to_id[added["content"]] = added["id"]
    if not token_to_id:
        raise UsageError(f"--tokenizer: {tok_json} has no vocabulary")

    special_ids: dict[str, int] = {}
    cfg_path = tok_dir / "tokenizer_config.json"
    if cfg_path.is_file():
        tok_cfg = json.loads(cfg_path.read_text(encoding="utf-8"))
        for role in ("bos", "eos"):
            token = tok_cfg.get(f"{role}_token")
            if isinstance(token, dict):  # serialized AddedToken
                token = token.get("content")
            if isinstance(token, str) and token in token_to_id:
                special_ids[f"{role}_token_id"] = token_to_id[token]
    return {"max_id": max(token_to_id.values()), "special_ids": special_ids}


def assemble_config_kwargs(
    preset: dict[str, Any], overrides: dict[str, Any], tok_info: dict[str, Any] | None
) -> dict[str, Any]:
    # Top-level merge: nested dicts such as rope_parameters are replaced whole, never merged,
    # so an override cannot leave stale yarn keys behind.
    kwargs = copy.deepcopy(preset["config"])
    kwargs.update(copy.deepcopy(overrides))
    if tok_info is None:
        return kwargs

    needed = tok_info["max_id"] + 1
    if kwargs["vocab_size"] < needed:
        if "vocab_size" in overrides:
            raise UsageError(
                f"vocab_size {overrides['vocab_size']} from --config-json does not cover the "
                f"tokenizer (highest id {tok_info['max_id']}, needs vocab_size >= {needed})"
            )
        note(f"raising vocab_size {kwargs['vocab_size']} -> {needed} to cover the tokenizer")
        kwargs["vocab_size"] = needed
    for key, token_id in tok_info["special_ids"].items():
        if key not in overrides:  # an explicit --config-json value wins
            kwargs[key] = token_id
    return kwargs


def check_v2_rope_dims(kwargs: dict[str, Any]) -> None:
    """transformers' DeepseekV2 rope does view_as_complex on slices of q and of the kv_a output;
    in float32 that needs even row strides, i.e. even qk_nope+qk_rope and kv_lora_rank+qk_rope
    (bf16 works only because .float() makes a copy). Fail clearly instead of deep in a forward."""
    rope = kwargs["qk_rope_head_dim"]
    for other in ("qk_nope_head_dim", "kv_lora_rank"):
        if (kwargs[other] + rope) % 2:
            raise UsageError(
                f"deepseek_v2 in transformers needs {other} + qk_rope_head_dim to be even "
                f"(got {kwargs[other]} + {rope})"
            )


def check_routing_groups(arch: str, kwargs: dict[str, Any]) -> None:
    """Expert groups must tile the experts (transformers views scores as [groups, E/groups]);
    V3 scores a group by its top-2 experts, so groups need >= 2 experts."""
    sigmoid_router = arch in ("deepseek_v3", "deepseek_v32", "glm_moe_dsa", "glm4_moe_lite")
    grouped = sigmoid_router or kwargs.get("topk_method") == "group_limited_greedy"
    if not grouped:
        return
    experts, groups = kwargs["n_routed_experts"], kwargs.get("n_group") or 1
    if experts % groups or (sigmoid_router and experts // groups < 2):
        raise UsageError(f"n_routed_experts {experts} cannot be split into n_group {groups} groups")
    if not 1 <= (kwargs.get("topk_group") or 1) <= groups:
        raise UsageError(f"topk_group must be in [1, n_group={groups}], got {kwargs.get('topk_group')}")


def build_config(arch: str, kwargs: dict[str, Any]):
    from huggingface_hub.errors import StrictDataclassError  # raised by @strict configs
    from transformers import DeepseekV2Config, DeepseekV3Config, DeepseekV32Config, GlmMoeDsaConfig

    if kwargs.get("qk_rope_head_dim", 2) % 2:
        raise UsageError(f"qk_rope_head_dim must be even (rotary pairs), got {kwargs['qk_rope_head_dim']}")
    if arch == "deepseek_v2":
        check_v2_rope_dims(kwargs)
    check_routing_groups(arch, kwargs)

    if arch in FAMILY_CLASSES:
        import transformers

        try:
            return getattr(transformers, FAMILY_CLASSES[arch][0])(**kwargs)
        except (StrictDataclassError, TypeError, ValueError) as e:
            raise UsageError(f"transformers rejected the config: {e}") from e
    config_cls = {"deepseek_v2": DeepseekV2Config, "deepseek_v3": DeepseekV3Config,
                  "deepseek_v32": DeepseekV32Config, "glm_moe_dsa": GlmMoeDsaConfig}.get(arch)
    if config_cls is None:  # Other families: transformers' own class for the model_type.
        from transformers import AutoConfig

        config_cls = lambda **kw: AutoConfig.for_model(arch, **kw)  # noqa: E731
    try:
        return config_cls(**kwargs)
    except (StrictDataclassError, TypeError, ValueError) as e:
        raise UsageError(f"transformers rejected the config: {e}") from e


# --------------------------------------------------------------------------------------------
# Model construction and re-randomization
# --------------------------------------------------------------------------------------------

# Weight std = gain / sqrt(fan_in) (fan_in = last dim). Chosen so that, at these tiny sizes,
# every part of the network visibly matters (the tests check the resulting properties):
#  * q/k producing projections get gain 1.5 so attention is clearly non-uniform (otherwise
#    rope / position / mask bugs barely change the output) without being one-hot;
#  * gate/up projections (dense, shared and routed experts) get 1.5 so the SiLU is in its
#    non-linear range and the MLP/MoE output is comparable to the residual stream;
#  * lm_head gets 2.5, for a logit std over the vocab of ~2.5 (clear argmax margins);
#  * everything else (o_proj, down_proj, q_a_proj) uses 0.5, keeping the residual bounded.
DEFAULT_GAIN = 0.5
GAIN_BY_SUFFIX = {
    "self_attn.q_proj.weight": 1.5,
    "self_attn.q_b_proj.weight": 1.5,
    "self_attn.kv_a_proj_with_mqa.weight": 1.5,
    "self_attn.kv_b_proj.weight": 1.5,
    "gate_proj.weight": 1.5,
    "up_proj.weight": 1.5,
    "experts.gate_up_proj": 1.5,  # fused [E, 2I, D] in memory
    "self_attn.q_gate_proj.weight": 1.5,  # A.X-K2's fused query and output gate
    # A.X-K2's gated RMSNorm: a gate that visibly varies per channel and token (sigmoid of std ~1)
    "layernorm.mlp.fc1.weight": 1.5,
    "layernorm.mlp.fc2.weight": 2.0,
    "indexer.wq_b.weight": 1.5,  # DSA indexer queries and keys: clear score differences
    "indexer.wk.weight": 1.5,
    # glm5_next's KPool: gate scores and positional terms that make the pool softmax uneven
    "indexer.index_kpool_compress_gate": 3.0,
    "indexer.index_kpool_compress_ape": 2.0,
    "lm_head.weight": 2.5,
    # bailing_hybrid: a KDA forget gate that spans its range (decays from 1 down to exp(-5)) and
    # output gates (KDA per channel, MLA per head) that visibly vary.
    "forget_gate.f_proj.weight": 2.0,
    "self_attn.g_proj.weight": 1.5,
}
EMBED_STD = 1.0
# Tied LM head (youtu, minicpm3): with the embedding at full size the residual stream stays close
# to the current token's row, whose logit then wins: the model only repeats its input. Smaller
# rows let attention and the MLP decide the next token.
TIED_EMBED_SCALE = 0.25
NORM_JITTER = 0.1  # RMSNorm weight = 1 + NORM_JITTER * randn
# Router logits std ~2 (std 2/sqrt(hidden) on a unit-RMS input): top-k choices differ between
# tokens because of the router, not noise (default init gives logit std ~0.15). Near-ties still
# occur for some tokens, so fp8/bf16 rounding can flip a few choices.
ROUTER_GAIN = 2.0
SCORE_BIAS_STD = 0.1  # e_score_correction_bias, shifts V3 choices without dominating them
# mistral_large4: q *= s * ln(pos + 1) + b with s ~ 0.05 +- 0.05 (about 1.3x at 300 tokens) and
# b ~ 1 +- NORM_JITTER; LeRoPE frequencies times exp(alpha), alpha ~ 0.3 randn (0.5x to 2x).
LOG_POSITION_SCALE_MEAN = 0.05
LOG_POSITION_SCALE_STD = 0.05
LEROPE_ALPHA_STD = 0.3
# hy_v4: sink logits around the scores' scale, so the sink takes a visible, varying share of each
# head's softmax; hyper-connection gates sigmoid(mixes * scale + base) with scale ~1 (init 0.01
# would make every gate a constant) and base ~ N(0, 0.5), so the streams mix differently.
SINK_MEAN = 0.5
SINK_STD = 1.0
HC_BASE_STD = 0.5


# LongCat's per-sublayer norms: input_layernorm.0.weight, post_attention_layernorm.1.weight.
LONGCAT_NORM = re.compile(r"layernorm\.\d+\.weight$")


def weight_gain(name: str) -> float:
    for suffix, gain in GAIN_BY_SUFFIX.items():
        if name.endswith(suffix):
            return gain
    return DEFAULT_GAIN


@torch.no_grad()
def rerandomize(model: torch.nn.Module, seed: int) -> None:
    gen = torch.Generator().manual_seed(seed)

    def randn_like(t: torch.Tensor) -> torch.Tensor:
        # Draw in float32 from our own generator so values do not depend on the storage dtype.
        return torch.randn(t.shape, generator=gen, dtype=torch.float32)

    for name, param in model.named_parameters():
        if name.endswith("embed_tokens.weight"):
            # MiniCPM3 multiplies the embeddings by scale_emb: keep the scaled ones at EMBED_STD.
            std = EMBED_STD / getattr(model.config, "scale_emb", 1.0)
            if model.config.tie_word_embeddings:
                std *= TIED_EMBED_SCALE
            value = randn_like(param) * std
        elif param.ndim == 1 and (name.endswith("norm.weight") or LONGCAT_NORM.search(name)):
            value = 1.0 + NORM_JITTER * randn_like(param)
        elif param.ndim == 1 and name.endswith("norm.bias"):  # the DSA indexer's LayerNorm
            value = NORM_JITTER * randn_like(param)
        elif name.endswith("softmax_scaling.scale"):  # mistral_large4's log-position query scale
            value = LOG_POSITION_SCALE_MEAN + LOG_POSITION_SCALE_STD * randn_like(param)
        elif name.endswith("softmax_scaling.bias"):
            value = 1.0 + NORM_JITTER * randn_like(param)
        elif name.endswith("rotary_emb.alpha"):  # LeRoPE: inv_freq * exp(alpha)
            value = LEROPE_ALPHA_STD * randn_like(param)
        elif name.endswith("self_attn.sinks"):  # hy_v4's sink logit per head
            value = SINK_MEAN + SINK_STD * randn_like(param)
        elif name.endswith(("_hc.scale", "hc_head.hc_scale")):  # hy_v4's hyper-connection gates
            value = 1.0 + NORM_JITTER * randn_like(param)
        elif name.endswith(("_hc.base", "hc_head.hc_base")):
            value = HC_BASE_STD * randn_like(param)
        elif name.endswith("forget_gate.A_log"):  # KDA decay rates exp(A_log) in [1, 16] (FLA's init)
            value = (1.0 + 15.0 * torch.rand(param.shape, generator=gen)).log()
        elif name.endswith("forget_gate.dt_bias"):  # softplus(dt_bias) in [1e-3, 1e-1] (FLA's init)
            dt = torch.exp(math.log(1e-3) + (math.log(1e-1) - math.log(1e-3)) * torch.rand(param.shape, generator=gen))
            value = dt + torch.log(-torch.expm1(-dt))
        elif name.endswith(("mlp.gate.weight", "router.classifier.weight")):  # routers
            value = randn_like(param) * (ROUTER_GAIN / math.sqrt(param.shape[-1]))
        elif param.ndim >= 2:
            # Linear weights [out, in] and fused experts [E, out, in]: fan_in is the last dim.
            value = randn_like(param) * (weight_gain(name) / math.sqrt(param.shape[-1]))
        else:
            raise RuntimeError(f"no re-randomization rule for parameter {name} {tuple(param.shape)}")
        param.copy_(value)

    for name, buf in model.named_buffers():
        if name.endswith("e_score_correction_bias"):
            buf.copy_(randn_like(buf) * SCORE_BIAS_STD)


def build_model(arch: str, config, seed: int, dtype: torch.dtype):
    from transformers import (DeepseekV2ForCausalLM, DeepseekV3ForCausalLM, DeepseekV32ForCausalLM,
                              GlmMoeDsaForCausalLM)

    if arch in FAMILY_CLASSES:
        import transformers

        model_cls = getattr(transformers, FAMILY_CLASSES[arch][1])
    else:
        model_cls = None
    model_cls = model_cls or {"deepseek_v2": DeepseekV2ForCausalLM, "deepseek_v3": DeepseekV3ForCausalLM,
                 "deepseek_v32": DeepseekV32ForCausalLM, "glm_moe_dsa": GlmMoeDsaForCausalLM}.get(arch)
    if model_cls is None:  # Other families: transformers' own CausalLM for the config.
        from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING

        model_cls = MODEL_FOR_CAUSAL_LM_MAPPING[type(config)]
    torch.manual_seed(seed)
    model = model_cls(config)  # float32
    # Randomize in float32 so a bf16 model is exactly the rounded float32 model of the same seed.
    rerandomize(model, seed)
    if dtype != torch.float32:
        # Let transformers pick per-tensor dtypes (_keep_in_fp32_modules_strict keeps the router
        # weight and e_score_correction_bias in float32), then copy the values in.
        low = model_cls._from_config(config, dtype=dtype)
        low.load_state_dict(model.state_dict())
        model = low
    # The default "grouped_mm" experts path needs 16-byte aligned rows, which odd dims break.
    model.set_experts_implementation(REFERENCE_EXPERTS_IMPLEMENTATION)
    return model.eval()


# Vision-language wrappers whose checkpoints AutoModelForCausalLM does not load.
WRAPPER_CLASSES = {"mistral_large4": "MistralLarge4ForConditionalGeneration",
                   "glm5_next": "Glm5NextForConditionalGeneration"}


def load_reference_model(ckpt_dir: str | Path, dtype: torch.dtype = torch.float32):
    """Load a (non-fp8) checkpoint made by this tool with transformers, for reference outputs.

    Handles what plain AutoModelForCausalLM.from_pretrained cannot: model_type kimi_k2 (loaded as
    DeepseekV3), and odd dims (experts_implementation "eager"). For --fp8 checkpoints, call
    dequantize_fp8_checkpoint first.
    """
    from transformers import AutoModelForCausalLM, DeepseekV3Config, DeepseekV3ForCausalLM

    ckpt = Path(ckpt_dir)
    raw = read_json(ckpt / "config.json")
    if "quantization_config" in raw:
        raise ValueError(f"{ckpt} is quantized; load the output of dequantize_fp8_checkpoint instead")
    load_kwargs = {"dtype": dtype, "experts_implementation": REFERENCE_EXPERTS_IMPLEMENTATION}
    if raw.get("model_type") in WRAPPER_CLASSES:  # not in AutoModelForCausalLM's mapping
        import transformers

        model_cls = getattr(transformers, WRAPPER_CLASSES[raw["model_type"]])
        return model_cls.from_pretrained(ckpt, **load_kwargs).eval()
    if raw.get("model_type") in MODEL_TYPE_ALIASES:
        fields = {k: v for k, v in raw.items() if k not in ("model_type", "architectures", "transformers_version")}
        config = DeepseekV3Config(**fields)
        model = DeepseekV3ForCausalLM.from_pretrained(ckpt, config=config, **load_kwargs)
    else:
        model = AutoModelForCausalLM.from_pretrained(ckpt, **load_kwargs)
    return model.eval()


@torch.no_grad()
def logit_std(model, vocab_size: int, seed: int) -> float:
    """Mean over positions of the std of logits over the vocab, for a random 16-token prompt."""
    gen = torch.Generator().manual_seed(seed + 1)
    ids = torch.randint(0, vocab_size, (1, 16), generator=gen)
    logits = model(input_ids=ids).logits.float()
    return float(logits.std(dim=-1).mean())


# --------------------------------------------------------------------------------------------
# Files
# --------------------------------------------------------------------------------------------


def note(message: str) -> None:
    print(f"make_tiny_model: {message}", file=sys.stderr)


def read_json(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text(encoding="utf-8"))


def write_json(path: Path, data: dict[str, Any]) -> None:
    # Same layout transformers uses for config.json.
    path.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n", encoding="utf-8")


def update_config_json(out: Path, updates: dict[str, Any], remove: tuple[str, ...] = ()) -> None:
    path = out / "config.json"
    data = read_json(path)
    data.update(updates)
    for key in remove:
        data.pop(key, None)
    write_json(path, data)


def remove_stale_weights(out: Path) -> None:
    """Drop weight files of an earlier run: save_pretrained removes old shards but leaves an old
    index next to a new single-file checkpoint, and loaders prefer the index."""
    for path in [*out.glob("model*.safetensors"), *out.glob("model*.safetensors.tmp"), out / INDEX_FILE]:
        if path.is_file():
            path.unlink()


def copy_tokenizer(tok_dir: Path, out: Path) -> list[str]:
    copied = []
    for name in TOKENIZER_FILES:
        if (tok_dir / name).is_file():
            shutil.copyfile(tok_dir / name, out / name)
            copied.append(name)
    return copied


def shard_files(ckpt: Path) -> list[str]:
    if (ckpt / INDEX_FILE).is_file():
        return sorted(set(read_json(ckpt / INDEX_FILE)["weight_map"].values()))
    if (ckpt / SINGLE_FILE).is_file():
        return [SINGLE_FILE]
    raise FileNotFoundError(f"no {SINGLE_FILE} or {INDEX_FILE} in {ckpt}")


def rewrite_shards(src: Path, dst: Path, transform) -> None:
    """Apply `transform(state_dict) -> state_dict` to every shard of src, writing dst.

    Keeps the shard layout; the index (if any) gets the new tensor names mapped to the shard
    their source tensor lived in, and a recomputed total_size.
    """
    from safetensors.torch import load_file, save_file

    weight_map: dict[str, str] = {}
    total_size = 0
    for fname in shard_files(src):
        tensors = transform(load_file(src / fname))
        # Write beside and rename: src may be dst (in-place fp8 rewrite).
        tmp = dst / (fname + ".tmp")
        save_file({k: v.contiguous() for k, v in tensors.items()}, tmp, metadata=SAFETENSORS_METADATA)
        tmp.replace(dst / fname)
        for key, tensor in tensors.items():
            weight_map[key] = fname
            total_size += tensor.numel() * tensor.element_size()
    if (src / INDEX_FILE).is_file():
        index = read_json(src / INDEX_FILE)
        index["metadata"] = {**index.get("metadata", {}), "total_size": total_size}
        index["weight_map"] = dict(sorted(weight_map.items()))
        (dst / INDEX_FILE).write_text(json.dumps(index, indent=2, sort_keys=True) + "\n", encoding="utf-8")


# --------------------------------------------------------------------------------------------
# FP8 block quantization (DeepSeek V3 release format)
# --------------------------------------------------------------------------------------------


# Kept in full precision, as DeepSeek's fp8 releases store them and as latent reads them only:
# embeddings, output heads (Mistral's native `output.weight` too), routers (`mlp.gate`, Kimi
# Linear's `block_sparse_moe.gate`, Mistral's native `layers.N.gate`, `router.classifier`) and
# the DSA indexer's `weights_proj`.
FP8_KEPT_SUFFIXES = ("embed_tokens.weight", "word_embeddings.weight", "tok_embeddings.weight",
                     "lm_head.weight", ".gate.weight", "router.classifier.weight",
                     "indexer.weights_proj.weight")


def is_fp8_quantized_weight(name: str, tensor: torch.Tensor) -> bool:
    """Every Linear weight except those of FP8_KEPT_SUFFIXES (norms are 1-D)."""
    if tensor.ndim != 2 or not name.endswith(".weight"):
        return False
    return not (name == "output.weight" or name.endswith(FP8_KEPT_SUFFIXES))


def quantize_fp8_block(weight: torch.Tensor, block: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Return (q float8_e4m3fn [N,K], scale_inv float32 [ceil(N/B), ceil(K/B)]).

    Dequantization is W[n,k] = q[n,k] * scale_inv[n // B, k // B].
    """
    w = weight.float()
    n, k = w.shape
    nb, kb = math.ceil(n / block), math.ceil(k / block)
    padded = torch.zeros(nb * block, kb * block)
    padded[:n, :k] = w
    blocks = padded.view(nb, block, kb, block)
    amax = blocks.abs().amax(dim=(1, 3))
    scale = torch.where(amax > 0, amax / FP8_E4M3_MAX, torch.ones_like(amax))  # all-zero block: any scale
    scaled = (blocks / scale[:, None, :, None]).clamp(-FP8_E4M3_MAX, FP8_E4M3_MAX)  # clamp: e4m3fn has no inf
    q = scaled.view(nb * block, kb * block)[:n, :k].to(torch.float8_e4m3fn)
    return q.contiguous(), scale.to(torch.float32).contiguous()


def dequantize_fp8_block(q: torch.Tensor, scale_inv: torch.Tensor, block: int) -> torch.Tensor:
    n, k = q.shape
    expanded = scale_inv.repeat_interleave(block, dim=0)[:n].repeat_interleave(block, dim=1)[:, :k]
    return q.float() * expanded


def quantize_checkpoint_fp8(out: Path, block: int) -> None:
    def transform(tensors: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        result = {}
        for name, tensor in tensors.items():
            if is_fp8_quantized_weight(name, tensor):
                q, scale = quantize_fp8_block(tensor, block)
                result[name] = q
                result[name + "_scale_inv"] = scale
            else:
                result[name] = tensor
        return result

    rewrite_shards(out, out, transform)
    update_config_json(
        out,
        {
            "quantization_config": {
                "quant_method": "fp8",
                "fmt": "e4m3",
                "activation_scheme": "dynamic",
                "weight_block_size": [block, block],
            }
        },
    )


def dequantize_fp8_checkpoint(src_dir: str | Path, dst_dir: str | Path) -> None:
    """Write a float32, non-quantized copy of an --fp8 checkpoint (same shard layout).

    Every tensor becomes float32, `X.weight_scale_inv` is folded into `X.weight`, and config.json
    loses its quantization_config, so transformers loads it as the reference model (with
    experts_implementation="eager" for odd dims: use load_reference_model).
    """
    src, dst = Path(src_dir), Path(dst_dir)
    config = read_json(src / "config.json")
    qcfg = config.get("quantization_config")
    if not qcfg or qcfg.get("quant_method") != "fp8":
        raise ValueError(f"{src} is not an fp8 checkpoint (no fp8 quantization_config)")
    block_n, block_k = qcfg["weight_block_size"]
    if block_n != block_k:
        raise ValueError(f"only square blocks are supported, got {qcfg['weight_block_size']}")

    def transform(tensors: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        result = {}
        for name, tensor in tensors.items():
            if name.endswith("_scale_inv"):
                continue
            scale = tensors.get(name + "_scale_inv")
            if scale is not None:
                result[name] = dequantize_fp8_block(tensor, scale, block_n)
            else:
                result[name] = tensor.float()
        return result

    dst.mkdir(parents=True, exist_ok=True)
    for item in src.iterdir():  # config, generation config, tokenizer files, ...
        if item.is_file() and not item.name.endswith(".safetensors") and item.name != INDEX_FILE:
            shutil.copyfile(item, dst / item.name)
    rewrite_shards(src, dst, transform)
    config.pop("quantization_config")
    config["dtype"] = "float32"
    if "torch_dtype" in config:
        config["torch_dtype"] = "float32"
    write_json(dst / "config.json", config)


# --------------------------------------------------------------------------------------------
# CLI
# --------------------------------------------------------------------------------------------


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="presets:\n" + preset_listing(),
    )
    parser.add_argument("--preset", choices=sorted(PRESETS), help="model preset (see below)")
    parser.add_argument("--out", type=Path, help="output directory (created; existing files are overwritten)")
    parser.add_argument(
        "--config-json",
        help="JSON object merged over the preset's config kwargs; nested dicts (rope_parameters) are replaced whole",
    )
    parser.add_argument(
        "--tokenizer",
        type=Path,
        help="directory with tokenizer.json (+ tokenizer_config.json, ...) to copy; vocab_size is raised to "
        "cover every token id and bos/eos ids are taken from tokenizer_config.json",
    )
    parser.add_argument("--seed", type=int, default=0, help="seed for construction and re-randomization (default 0)")
    parser.add_argument(
        "--dtype",
        choices=("float32", "bfloat16"),
        help="dtype of saved weights (default float32; bfloat16 with --fp8). The router weight and "
        "e_score_correction_bias always stay float32, as transformers keeps them",
    )
    parser.add_argument(
        "--fp8",
        action="store_true",
        help="store Linear weights (attention, dense MLP, experts, shared experts) as float8_e4m3fn with "
        "per-block float32 weight_scale_inv, as in DeepSeek's FP8 release; embeddings, lm_head, norms and "
        "the router keep --dtype",
    )
    parser.add_argument(
        "--fp8-block", type=int, default=DEFAULT_FP8_BLOCK, help=f"fp8 block size B (default {DEFAULT_FP8_BLOCK})"
    )
    parser.add_argument(
        "--max-shard-size", help='passed to save_pretrained, e.g. "20KB", to get a sharded checkpoint with an index'
    )
    parser.add_argument("--list-presets", action="store_true", help="list presets and exit")
    args = parser.parse_args(argv)
    if args.list_presets:
        return args
    if args.preset is None or args.out is None:
        parser.error("--preset and --out are required")  # exits 2
    if args.fp8_block <= 0:
        parser.error("--fp8-block must be positive")
    if args.dtype is None:
        args.dtype = "bfloat16" if args.fp8 else "float32"
    return args


def make_tiny_model(args: argparse.Namespace) -> dict[str, Any]:
    from transformers import GenerationConfig
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # keep stderr readable
    preset = PRESETS[args.preset]
    check_out_dir(args.out)
    check_max_shard_size(args.max_shard_size)
    overrides = parse_config_json(args.config_json)
    tok_info = None
    if args.tokenizer is not None:
        if not args.tokenizer.is_dir():
            raise UsageError(f"--tokenizer: {args.tokenizer} is not a directory")
        tok_info = read_tokenizer_info(args.tokenizer)
    kwargs = assemble_config_kwargs(preset, overrides, tok_info)
    config = build_config(preset["arch"], kwargs)
    dtype = {"float32": torch.float32, "bfloat16": torch.bfloat16}[args.dtype]

    try:
        if preset.get("wrapper") == "mistral_large4":
            model = build_mistral_large4(config, args.seed, dtype)
        elif preset.get("wrapper") == "glm5_next":
            model = build_glm5_next(config, args.seed, dtype)
        else:
            model = build_model(preset["arch"], config, args.seed, dtype)
    except ValueError as e:
        # A config transformers refuses as it builds (its strict field checks raise ValueError).
        # Anything else (RuntimeError, IndexError, ...) is a bug here or in transformers and
        # keeps its traceback rather than passing for a usage error.
        raise UsageError(f"transformers cannot build the model from this config: {e}") from e
    num_parameters = model.num_parameters()  # parameters only: no buffers, no fp8 scales
    std = logit_std(model, config.vocab_size, args.seed)
    if std <= 1.0:
        note(f"warning: logits are close to uniform (std over vocab {std:.3f})")

    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    remove_stale_weights(out)
    model.generation_config = GenerationConfig(
        bos_token_id=config.bos_token_id, eos_token_id=config.eos_token_id, do_sample=False
    )
    save_kwargs: dict[str, Any] = {"safe_serialization": True}
    if args.max_shard_size:
        save_kwargs["max_shard_size"] = args.max_shard_size
    if preset.get("wrapper") == "mistral3":
        model = build_wrapper(model, args.seed)
        model.generation_config = GenerationConfig(
            bos_token_id=config.bos_token_id, eos_token_id=config.eos_token_id, do_sample=False
        )
    model.save_pretrained(out, **save_kwargs)

    saved_model_type = preset.get("saved_model_type")
    if saved_model_type:
        # transformers has no kimi_k2 mapping: the architecture stays DeepseekV3ForCausalLM.
        update_config_json(out, {"model_type": saved_model_type})
    if preset["arch"] == "longcat_flash":
        # transformers reads num_hidden_layers as 2 * num_layers (one per MLA sublayer) but does not
        # save it; stated, config.json says how many latent rows a token caches, as every other
        # family's does (transformers loads it back unchanged; latent checks the two agree).
        update_config_json(out, {"num_hidden_layers": config.num_hidden_layers})
    if args.fp8:
        quantize_checkpoint_fp8(out, args.fp8_block)
    if args.tokenizer is not None:
        copy_tokenizer(args.tokenizer, out)

    return {
        "out": str(out),
        "preset": args.preset,
        "model_type": saved_model_type or config.model_type,
        "num_parameters": num_parameters,
        "fp8": bool(args.fp8),
        "dtype": args.dtype,
        "vocab_size": config.vocab_size,
        "logits_std": round(std, 3),
    }


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.list_presets:
        print(preset_listing())
        return 0
    try:
        summary = make_tiny_model(args)
    except UsageError as e:
        print(f"make_tiny_model: error: {e}", file=sys.stderr)
        return 2
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
