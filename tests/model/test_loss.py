"""token_cross_entropy: fp32 loss from bf16 logits, the reference's gradient, no fp32 copy of the whole batch."""
import pytest
import torch
import torch.nn.functional as F

from model.checkpoint_eval import channel_loss
from pretrain.channels import CHANNELS
from model.llama import ModelArgs, Transformer
from model.loss import token_cross_entropy
from model.steps import N_CHANNELS, STATS, step_loss


def reference(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(logits.double(), targets, reduction="none")


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
@pytest.mark.parametrize("chunk_elements", [1 << 26, 3 * 97])  # one chunk; a chunk of 3 rows (ragged last one)
def test_loss_and_gradient_match_the_float64_reference(dtype, chunk_elements):
    torch.manual_seed(0)
    logits = (4 * torch.randn(40, 97)).to(dtype).requires_grad_()
    targets = torch.randint(0, 97, (40,))
    weights = torch.rand(40)  # a per-token upstream gradient, as the channel-weighted mean gives
    ours = token_cross_entropy(logits, targets, chunk_elements)
    assert ours.dtype == torch.float32
    (ours * weights).sum().backward()
    ref_logits = logits.detach().double().requires_grad_()
    ref = reference(ref_logits, targets)
    (ref * weights.double()).sum().backward()
    torch.testing.assert_close(ours.double(), ref, rtol=1e-6, atol=1e-6)  # fp32 arithmetic on the same inputs
    assert logits.grad.dtype == dtype
    # bf16: the reference gradient rounded once to bf16, as autograd hands it to bf16 logits
    torch.testing.assert_close(logits.grad, ref_logits.grad.to(dtype), rtol=1e-2 if dtype == torch.bfloat16 else 1e-5,
                               atol=1e-6)


def saved_for_backward(fn) -> list[torch.Tensor]:
    saved = []

    def pack(t):
        saved.append(t)
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        fn()
    return saved


def test_no_fp32_logits_of_the_whole_batch_are_kept_for_backward():
    logits = torch.randn(64, 500).bfloat16().requires_grad_()
    targets = torch.randint(0, 500, (64,))
    big = 64 * 500
    upcast = saved_for_backward(lambda: F.cross_entropy(logits.float(), targets))  # what the check would catch
    assert any(t.dtype == torch.float32 and t.numel() == big for t in upcast)
    ours = saved_for_backward(lambda: token_cross_entropy(logits, targets, chunk_elements=16 * 500).mean())
    assert not any(t.dtype == torch.float32 and t.numel() >= big for t in ours)


def test_a_second_backward_is_refused_not_wrong():
    logits = torch.randn(4, 7).requires_grad_()
    loss = token_cross_entropy(logits, torch.zeros(4, dtype=torch.long)).sum()
    loss.backward(retain_graph=True)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):  # the gradient is scaled in place
        loss.backward()


class Engine(Transformer):
    device = torch.device("cpu")


def test_the_loss_training_watches_is_the_loss_eval_reports():
    """bf16 model: the training step's per-channel loss equals the checkpoint scorer's on the same samples."""
    torch.manual_seed(0)
    L = 16
    engine = Engine(ModelArgs(dim=32, n_layers=2, n_heads=2, n_kv_heads=1, vocab_size=300, ffn_hidden=64,
                              max_seq_len=L)).to(torch.bfloat16)
    stream = torch.randint(0, 300, (4 * L + 1,))
    tokens = torch.stack([stream[j * L: j * L + L + 1] for j in range(4)])  # eval sample j of the stream
    channels = torch.full((4, L), CHANNELS.index("en"))
    stats = torch.zeros(STATS)
    step_loss(engine, tokens, channels, stats)
    trained_sum, trained_tokens = stats[1 + CHANNELS.index("en")].item(), stats[1 + N_CHANNELS + 1].item()
    eval_sum, eval_tokens = channel_loss(engine.eval(), stream, 4, L, batch=4, device="cpu")
    assert eval_tokens == trained_tokens == 4 * L
    assert eval_sum == pytest.approx(trained_sum, rel=1e-6)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_z_loss_and_its_gradient_match_the_float64_reference(dtype):
    from model.loss import token_losses

    torch.manual_seed(1)
    logits = (4 * torch.randn(40, 97) + 3).to(dtype).requires_grad_()  # an offset: log Z well away from 0
    targets = torch.randint(0, 97, (40,))
    weights = torch.rand(40)
    ours, log_z = token_losses(logits, targets, 3 * 97, z_weight=1e-2)
    (ours * weights).sum().backward()
    ref_logits = logits.detach().double().requires_grad_()
    ref_log_z = torch.logsumexp(ref_logits, dim=-1)
    ref = reference(ref_logits, targets) + 1e-2 * ref_log_z.square()
    (ref * weights.double()).sum().backward()
    torch.testing.assert_close(log_z.double(), ref_log_z.detach(), rtol=1e-6, atol=1e-5)
    torch.testing.assert_close(ours.double(), ref.detach(), rtol=1e-6, atol=1e-5)
    torch.testing.assert_close(logits.grad, ref_logits.grad.to(dtype), rtol=1e-2 if dtype == torch.bfloat16 else 1e-5,
                               atol=1e-6)
    assert not log_z.requires_grad
    plain, _ = token_losses(logits, targets, 3 * 97)  # no z-loss: the cross-entropy alone, exactly
    assert torch.equal(plain, token_cross_entropy(logits, targets, 3 * 97))
