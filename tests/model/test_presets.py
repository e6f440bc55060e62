"""Every preset: parameter count against the closed form, training FLOPs against a FLOP counter (on the meta device)."""
import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

from model.llama import ModelArgs, Transformer, closed_form_parameters, count_parameters, flops_per_token
from pretrain.config import ModelConfig
from pretrain.presets import PRESETS

VOCAB_ROWS = 64_128  # a 63k tokenizer + 1000 reserved, padded to 128


def args_for(preset: str) -> ModelArgs:
    m = ModelConfig(preset=preset)
    return ModelArgs(dim=m.dim, n_layers=m.n_layers, n_heads=m.n_heads, n_kv_heads=m.n_kv_heads, vocab_size=VOCAB_ROWS,
                     ffn_hidden=m.ffn_hidden, max_seq_len=m.max_seq_len, tie_embeddings=m.tie_embeddings)


@pytest.mark.parametrize("preset", sorted(PRESETS))
def test_preset_parameters_match_the_closed_form(preset):
    args = args_for(preset)
    with torch.device("meta"):
        model = Transformer(args)
    assert count_parameters(model) == closed_form_parameters(args)


@pytest.mark.parametrize("preset", sorted(PRESETS))
def test_preset_training_flops_match_a_flop_counter(preset):
    args = args_for(preset)
    seq = min(args.max_seq_len, 2048)
    with torch.device("meta"):
        model = Transformer(args)
        tokens = torch.zeros(1, seq, dtype=torch.long)
    with FlopCounterMode(display=False) as counter:
        model(tokens).sum().backward()
    measured = counter.get_total_flops() / seq
    # the counter also sees the norms, SiLU and the softmax; matmuls are > 97% at these sizes
    assert measured == pytest.approx(flops_per_token(args, seq), rel=0.03)


def test_preset_fields_can_be_overridden():
    m = ModelConfig(preset="125m", n_layers=6)
    assert (m.dim, m.n_layers) == (768, 6)
    with pytest.raises(ValueError, match="Field required"):
        ModelConfig(dim=64)
