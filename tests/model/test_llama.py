import pytest
import torch
import torch.nn.functional as F

from model.llama import (ModelArgs, Transformer, apply_rope, closed_form_parameters, count_parameters, flops_per_token,
                         rope_tables)

ARGS = ModelArgs(dim=64, n_layers=2, n_heads=4, n_kv_heads=2, vocab_size=256, ffn_hidden=160, max_seq_len=32)


@pytest.mark.parametrize("tie", [False, True])
def test_parameter_count_matches_closed_form(tie):
    args = ModelArgs(**{**ARGS.__dict__, "tie_embeddings": tie})
    assert count_parameters(Transformer(args)) == closed_form_parameters(args)


@pytest.mark.parametrize("preset", ["125m", "500m", "1.5b"])
def test_presets_have_the_advertised_size(preset):
    from pretrain.config import load_config
    from tests.conftest import ROOT

    from pretrain.config import embedding_rows

    cfg = load_config(ROOT / "configs" / f"{preset}.yaml")
    m, t = cfg.model, cfg.tokenizer
    args = ModelArgs(dim=m.dim, n_layers=m.n_layers, n_heads=m.n_heads, n_kv_heads=m.n_kv_heads,
                     vocab_size=embedding_rows(t.vocab_size + t.reserved_tokens, t.pad_to_multiple),
                     ffn_hidden=m.ffn_hidden, max_seq_len=m.max_seq_len, tie_embeddings=m.tie_embeddings)
    n = closed_form_parameters(args)
    target = {"125m": 125e6, "500m": 500e6, "1.5b": 1.5e9}[preset]
    assert 0.75 * target < n < 1.35 * target, f"{preset}: {n / 1e6:.0f}M parameters"
    assert flops_per_token(args, m.max_seq_len) > 6 * (n - args.vocab_size * args.dim)


def test_causal_future_tokens_do_not_change_past_logits():
    torch.manual_seed(0)
    model = Transformer(ARGS).eval()
    x = torch.randint(0, 256, (2, 16))
    y = x.clone()
    y[:, 10:] = torch.randint(0, 256, (2, 6))
    with torch.no_grad():
        a, b = model(x), model(y)
    torch.testing.assert_close(a[:, :10], b[:, :10])
    assert not torch.allclose(a[:, 10:], b[:, 10:])


def test_gqa_matches_explicitly_repeated_heads():
    torch.manual_seed(0)
    model = Transformer(ARGS).eval()
    attn = model.layers[0].attention
    x = torch.randn(1, 8, 64)
    cos, sin = model.rope_cos[:8], model.rope_sin[:8]
    from model.llama import apply_rope

    q = apply_rope(attn.wq(x).view(1, 8, 4, 16), cos, sin).transpose(1, 2)
    k = apply_rope(attn.wk(x).view(1, 8, 2, 16), cos, sin).transpose(1, 2).repeat_interleave(2, dim=1)
    v = attn.wv(x).view(1, 8, 2, 16).transpose(1, 2).repeat_interleave(2, dim=1)
    ref = attn.wo(F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(1, 8, 64))
    torch.testing.assert_close(attn(x, cos, sin), ref)


def test_overfits_one_batch_with_and_without_checkpointing():
    for ckpt in (False, True):
        torch.manual_seed(0)
        model = Transformer(ARGS, activation_checkpointing=ckpt)
        opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
        x = torch.randint(0, 256, (4, 17))
        losses = []
        for _ in range(60):
            loss = F.cross_entropy(model(x[:, :-1]).flatten(0, 1), x[:, 1:].flatten())
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses.append(loss.item())
        assert losses[-1] < 0.2 * losses[0]


def test_rejects_too_long_sequences():
    with pytest.raises(ValueError, match="exceeds max_seq_len"):
        Transformer(ARGS)(torch.zeros(1, 33, dtype=torch.long))


def test_gqa_with_as_many_kv_heads_as_heads_is_multi_head_attention():
    torch.manual_seed(0)
    args = ModelArgs(dim=64, n_layers=1, n_heads=4, n_kv_heads=4, vocab_size=256, ffn_hidden=160, max_seq_len=32)
    attn = Transformer(args).eval().layers[0].attention
    x = torch.randn(2, 10, 64)
    cos, sin = rope_tables(16, 10, args.rope_theta)
    q = apply_rope(attn.wq(x).view(2, 10, 4, 16), cos, sin).transpose(1, 2)
    k = apply_rope(attn.wk(x).view(2, 10, 4, 16), cos, sin).transpose(1, 2)
    v = attn.wv(x).view(2, 10, 4, 16).transpose(1, 2)
    # textbook multi-head attention, written out: softmax(QK^T / sqrt(d) + causal mask) V
    scores = q @ k.transpose(-1, -2) / 4.0
    scores = scores.masked_fill(torch.triu(torch.ones(10, 10, dtype=torch.bool), 1), float("-inf"))
    ref = attn.wo((scores.softmax(-1) @ v).transpose(1, 2).reshape(2, 10, 64))
    with torch.no_grad():
        torch.testing.assert_close(attn(x, cos, sin), ref, rtol=1e-5, atol=1e-6)


def test_rope_scores_depend_only_on_the_relative_position():
    torch.manual_seed(0)
    cos, sin = rope_tables(16, 64, 10000.0)
    q, k = torch.randn(1, 1, 1, 16), torch.randn(1, 1, 1, 16)

    def score(m: int, n: int) -> float:
        qm = apply_rope(q, cos[m:m + 1], sin[m:m + 1])
        kn = apply_rope(k, cos[n:n + 1], sin[n:n + 1])
        return (qm * kn).sum().item()

    assert score(5, 2) == pytest.approx(score(40, 37), rel=1e-5)
    assert score(9, 9) == pytest.approx(score(0, 0), rel=1e-5)
    assert score(5, 2) != pytest.approx(score(5, 4), rel=1e-3)
