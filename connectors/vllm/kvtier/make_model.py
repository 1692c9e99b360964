"""Writes a random-weight Llama model that vLLM can load offline (tests, benchmarks).

The model hub is not reachable here, so tests and the benchmark build their model:
``LlamaForCausalLM`` with random weights (seeded, so every run writes the same bytes),
saved as safetensors, plus a word-level tokenizer (``w0 .. wN`` and ``[UNK]``) wrapped
in ``PreTrainedTokenizerFast``. vLLM's CPU attention needs head sizes of 32, 64, 80, ...
(not 16), so ``hidden / heads`` must be one of those.

    python -m kvtier.make_model --out /tmp/tiny            # 2 layers, hidden 128 (~1 MB)
    python -m kvtier.make_model --out /tmp/m245 --preset bench   # 8 layers, hidden 1024
    python -m kvtier.make_model --out /tmp/g3 --family gemma3     # hybrid/SWA family

``--family`` writes a tiny random model of another architecture instead (FAMILIES: its
transformers config class and the tiny settings; the KV groups vLLM's hybrid KV cache
manager makes of it are what the HMA tests exercise): ``gemma3`` (sliding-window and
full-attention layers), ``gpt_oss`` (the same, MoE), ``qwen3_next`` / ``qwen3_5``
(gated-DeltaNet linear attention + full attention), ``granite4`` (Mamba2 + attention).
"""

from __future__ import annotations

import argparse
import json
import os
import sys

PRESETS = {
    # ~1 MB: fast enough for many LLM() starts in tests.
    "tiny": dict(layers=2, hidden=128, heads=4, kv_heads=2, ffn=256, vocab=1024),
    # ~245 MB in bf16: a size where loading vs recomputing is visible (ENGINES.md).
    "bench": dict(layers=8, hidden=1024, heads=16, kv_heads=4, ffn=4096, vocab=8192),
}


# Tiny configs of hybrid / sliding-window families: (transformers config class, settings).
# Two or four layers, hidden 128, head size 32 or 64 (vLLM's CPU attention needs 32, 64,
# 80, ...; its CPU gated-DeltaNet kernel rejects 32, so linear attention uses 128);
# windows of 256 tokens, so a prompt of several 256-token chunks has blocks
# outside the window. Every config's vocab is 1024 (the word-level tokenizer below).
_COMMON = dict(vocab_size=1024, hidden_size=128, intermediate_size=256,
               num_attention_heads=4, num_key_value_heads=2, initializer_range=0.2,
               tie_word_embeddings=False, bos_token_id=1, eos_token_id=2, pad_token_id=0)
FAMILIES = {
    "gemma3": ("Gemma3TextConfig", dict(
        _COMMON, num_hidden_layers=4, head_dim=32, sliding_window=256,
        layer_types=["sliding_attention", "sliding_attention", "sliding_attention",
                     "full_attention"], query_pre_attn_scalar=32)),
    "gpt_oss": ("GptOssConfig", dict(
        _COMMON, num_hidden_layers=2, head_dim=32, sliding_window=256,
        num_local_experts=4, num_experts_per_tok=2,
        layer_types=["sliding_attention", "full_attention"])),
    "qwen3_next": ("Qwen3NextConfig", dict(
        _COMMON, num_hidden_layers=4, head_dim=64, moe_intermediate_size=128,
        shared_expert_intermediate_size=128, num_experts=4, num_experts_per_tok=2,
        linear_num_value_heads=2, linear_num_key_heads=1, linear_key_head_dim=128,
        linear_value_head_dim=128, linear_conv_kernel_dim=4, full_attention_interval=2,
        layer_types=["linear_attention", "full_attention", "linear_attention",
                     "full_attention"])),
    "qwen3_5": ("Qwen3_5TextConfig", dict(
        _COMMON, num_hidden_layers=4, head_dim=64,
        linear_num_value_heads=2, linear_num_key_heads=1, linear_key_head_dim=128,
        linear_value_head_dim=128, linear_conv_kernel_dim=4, full_attention_interval=2,
        layer_types=["linear_attention", "full_attention", "linear_attention",
                     "full_attention"])),
    "granite4": ("GraniteMoeHybridConfig", dict(
        _COMMON, num_hidden_layers=4, num_local_experts=4, num_experts_per_tok=2,
        shared_intermediate_size=256, mamba_n_heads=4, mamba_d_head=64, mamba_d_state=64,
        mamba_n_groups=1, mamba_chunk_size=64,
        layer_types=["mamba", "attention", "mamba", "attention"])),
}


def words(n: int) -> list[str]:
    """The tokenizer's words: vocabulary entry i (for i >= 1) is ``w{i-1}``."""
    return [f"w{i}" for i in range(n)]


def make_model(out: str, layers: int, hidden: int, heads: int, kv_heads: int, ffn: int,
               vocab: int, max_len: int = 4096, seed: int = 0, dtype: str = "bfloat16") -> str:
    """Writes the model into ``out`` (created) and returns ``out``. Idempotent: an
    existing complete model with the same parameters is kept."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    params = dict(layers=layers, hidden=hidden, heads=heads, kv_heads=kv_heads, ffn=ffn,
                  vocab=vocab, max_len=max_len, seed=seed, dtype=dtype)
    stamp = os.path.join(out, "kvtier-model.json")
    if os.path.exists(stamp):
        with open(stamp) as f:
            if json.load(f) == params:
                return out
    head_dim = hidden // heads
    if hidden % heads or head_dim % 16 or head_dim < 32:
        raise ValueError(f"hidden {hidden} / heads {heads} = head size {hidden / heads}; "
                         "vLLM's CPU attention needs 32, 64, 80, ...")
    os.makedirs(out, exist_ok=True)
    torch.manual_seed(seed)
    config = LlamaConfig(vocab_size=vocab, hidden_size=hidden, intermediate_size=ffn,
                         num_hidden_layers=layers, num_attention_heads=heads,
                         num_key_value_heads=kv_heads, max_position_embeddings=max_len,
                         initializer_range=0.2, tie_word_embeddings=False,
                         bos_token_id=1, eos_token_id=2, pad_token_id=0)
    config.dtype = getattr(torch, dtype)
    model = LlamaForCausalLM(config).to(getattr(torch, dtype))
    model.save_pretrained(out, safe_serialization=True)

    _write_tokenizer(out, vocab, max_len)
    with open(stamp, "w") as f:
        json.dump(params, f)
    return out


def _write_tokenizer(out: str, vocab: int, max_len: int) -> None:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast
    vocab_map = {"[UNK]": 0, "[BOS]": 1, "[EOS]": 2}
    for w in words(vocab - len(vocab_map)):
        vocab_map[w] = len(vocab_map)
    tok = Tokenizer(models.WordLevel(vocab=vocab_map, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.decoder = decoders.WordPiece(prefix="##")  # joins words with spaces
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="[UNK]", bos_token="[BOS]",
                                   eos_token="[EOS]", pad_token="[UNK]")
    fast.model_max_length = max_len
    fast.save_pretrained(out)


def make_family_model(out: str, family: str, max_len: int = 4096, seed: int = 0,
                      dtype: str = "bfloat16", **overrides) -> str:
    """Writes a tiny random-weight model of `family` (a FAMILIES key) into `out` and
    returns `out`; `overrides` replace config settings (e.g. sliding_window=512).
    Idempotent like make_model. ValueError for an unknown family; the config class's
    own errors for bad settings."""
    import torch
    import transformers

    if family not in FAMILIES:
        raise ValueError(f"unknown family {family!r}; known: {', '.join(sorted(FAMILIES))}")
    cls_name, settings = FAMILIES[family]
    settings = dict(settings, max_position_embeddings=max_len, **overrides)
    params = dict(family=family, settings=settings, seed=seed, dtype=dtype)
    stamp = os.path.join(out, "kvtier-model.json")
    if os.path.exists(stamp):
        with open(stamp) as f:
            if json.load(f) == json.loads(json.dumps(params)):
                return out
    os.makedirs(out, exist_ok=True)
    torch.manual_seed(seed)
    config = getattr(transformers, cls_name)(**settings)
    config.dtype = getattr(torch, dtype)
    model = transformers.AutoModelForCausalLM.from_config(config).to(getattr(torch, dtype))
    model.save_pretrained(out, safe_serialization=True)
    _write_tokenizer(out, settings["vocab_size"], max_len)
    with open(stamp, "w") as f:
        json.dump(params, f)
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m kvtier.make_model", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", required=True, help="model directory to write")
    p.add_argument("--preset", choices=sorted(PRESETS), default="tiny")
    p.add_argument("--family", choices=sorted(FAMILIES),
                   help="a tiny hybrid/sliding-window model instead of the Llama preset")
    for k in ("layers", "hidden", "heads", "kv_heads", "ffn", "vocab"):
        p.add_argument(f"--{k.replace('_', '-')}", type=int, dest=k, help=f"override {k}")
    p.add_argument("--max-len", type=int, default=4096)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float16", "float32"])
    a = p.parse_args(argv)
    if a.family:
        make_family_model(a.out, a.family, max_len=a.max_len, seed=a.seed, dtype=a.dtype)
        print(a.out)
        return 0
    cfg = dict(PRESETS[a.preset])
    for k in cfg:
        if getattr(a, k) is not None:
            cfg[k] = getattr(a, k)
    try:
        make_model(a.out, max_len=a.max_len, seed=a.seed, dtype=a.dtype, **cfg)
    except ValueError as e:
        print(f"make_model: {e}", file=sys.stderr)
        return 2
    print(a.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
