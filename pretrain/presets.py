"""Model size presets: the architectures small teams train on clusters without NVLink.

Plain data, so the config layer can fill `model:` from a preset without importing torch.
The embedding rows come from the tokenizer report, so counts depend on the vocabulary;
tests/model/test_presets.py checks each against the closed form and a FLOP counter.
"""
from __future__ import annotations

PRESETS: dict[str, dict] = {
    # a CPU debug size: trains in seconds on two gloo ranks
    "debug": {"dim": 128, "n_layers": 4, "n_heads": 4, "n_kv_heads": 2, "ffn_hidden": 384, "max_seq_len": 256,
              "tie_embeddings": False},
    "125m": {"dim": 768, "n_layers": 12, "n_heads": 12, "n_kv_heads": 4, "ffn_hidden": 2048, "max_seq_len": 2048,
             "tie_embeddings": True},
    "500m": {"dim": 1280, "n_layers": 24, "n_heads": 20, "n_kv_heads": 4, "ffn_hidden": 3456, "max_seq_len": 4096,
             "tie_embeddings": True},
    "1.5b": {"dim": 2048, "n_layers": 24, "n_heads": 16, "n_kv_heads": 4, "ffn_hidden": 5632, "max_seq_len": 4096,
             "tie_embeddings": False},
}
