"""Writes a random-weight Llama model that vLLM can load offline (tests, benchmarks).

The model hub is not reachable here, so tests and the benchmark build their model:
``LlamaForCausalLM`` with random weights (seeded, so every run writes the same bytes),
saved as safetensors, plus a word-level tokenizer (``w0 .. wN`` and ``[UNK]``) wrapped
in ``PreTrainedTokenizerFast``. vLLM's CPU attention needs head sizes of 32, 64, 80, ...
(not 16), so ``hidden / heads`` must be one of those.

    python -m kvtier.make_model --out /tmp/tiny            # 2 layers, hidden 128 (~1 MB)
    python -m kvtier.make_model --out /tmp/m245 --preset bench   # 8 layers, hidden 1024
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


def words(n: int) -> list[str]:
    """The tokenizer's words: vocabulary entry i (for i >= 1) is ``w{i-1}``."""
    return [f"w{i}" for i in range(n)]


def make_model(out: str, layers: int, hidden: int, heads: int, kv_heads: int, ffn: int,
               vocab: int, max_len: int = 4096, seed: int = 0, dtype: str = "bfloat16") -> str:
    """Writes the model into ``out`` (created) and returns ``out``. Idempotent: an
    existing complete model with the same parameters is kept."""
    import torch
    from tokenizers import Tokenizer, models, pre_tokenizers, decoders
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

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
    with open(stamp, "w") as f:
        json.dump(params, f)
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m kvtier.make_model", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", required=True, help="model directory to write")
    p.add_argument("--preset", choices=sorted(PRESETS), default="tiny")
    for k in ("layers", "hidden", "heads", "kv_heads", "ffn", "vocab"):
        p.add_argument(f"--{k.replace('_', '-')}", type=int, dest=k, help=f"override {k}")
    p.add_argument("--max-len", type=int, default=4096)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float16", "float32"])
    a = p.parse_args(argv)
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
