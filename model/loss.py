"""Next-token cross-entropy in fp32 from logits of any precision, without fp32 logits for the whole batch.

`F.cross_entropy(logits.float(), ...)` on bf16 logits keeps two fp32 copies of
them (the upcast and log-softmax's saved output): for 16 x 2048 tokens and a
100k vocabulary that is 26 GB beside the 6.5 GB of bf16 logits. Here rows are
upcast a chunk at a time; the loss of each token is computed in fp32, and the
gradient with respect to the logits, (softmax - one-hot), is computed in the
same pass and kept in the logits' own dtype, which is the dtype autograd would
hand back to the bf16 logits anyway. Training, the in-training eval and the
checkpoint scorer all go through `token_cross_entropy`, so the loss the anomaly
detector watches is the loss eval reports.

z-loss (PaLM; OLMo, Marin): `z_weight * log(Z)^2` per token, Z the softmax's
normalizer, keeps the output logits from drifting upward, which on small
batches late in a decay shows as a slow loss rise. Its gradient,
2 z_weight log(Z) softmax, joins (softmax - one-hot) in the same pass.
"""
from __future__ import annotations

import torch

CHUNK_ELEMENTS = 1 << 26  # fp32 elements upcast at once: 256 MB


class _TokenCrossEntropy(torch.autograd.Function):
    @staticmethod
    def forward(ctx, logits: torch.Tensor, targets: torch.Tensor, rows: int, z_weight: float
                ) -> tuple[torch.Tensor, torch.Tensor]:
        n = logits.shape[0]
        fp32 = logits.dtype == torch.float32
        losses = torch.empty(n, dtype=torch.float32, device=logits.device)
        log_z = torch.empty(n, dtype=torch.float32, device=logits.device)
        grad = torch.empty_like(logits) if ctx.needs_input_grad[0] else None
        scratch = None if fp32 and grad is not None else \
            torch.empty(min(n, rows), logits.shape[1], dtype=torch.float32, device=logits.device)
        for start in range(0, n, rows):
            stop = min(n, start + rows)
            target = targets[start:stop].unsqueeze(1)
            # fp32 log-softmax of the rows, upcast inside the kernel, into the gradient's own rows when it is fp32
            logp = grad[start:stop] if scratch is None else scratch[:stop - start]
            torch.log_softmax(logits[start:stop], dim=-1, dtype=torch.float32, out=logp)
            picked = logp.gather(1, target).squeeze(1)
            losses[start:stop] = -picked
            log_z[start:stop] = logits[start:stop].gather(1, target).squeeze(1).float() - picked  # x_t - log p_t
            if grad is not None:
                probs = logp.exp_()
                if z_weight:
                    probs.mul_(1 + 2 * z_weight * log_z[start:stop, None])
                probs.scatter_add_(1, target, torch.full_like(target, -1, dtype=probs.dtype))  # softmax - one-hot
                if scratch is not None:
                    grad[start:stop] = probs
        ctx.rows = rows
        ctx.save_for_backward(grad)
        ctx.mark_non_differentiable(log_z)
        if z_weight:
            losses.add_(z_weight * log_z.square())
        return losses, log_z

    @staticmethod
    def backward(ctx, grad_losses: torch.Tensor, _grad_log_z: torch.Tensor | None):
        (grad,) = ctx.saved_tensors
        # scaled in fp32 a chunk at a time, in place: a second backward (retain_graph) is refused by autograd's
        # version check on the saved tensor
        for start in range(0, grad.shape[0], ctx.rows):
            stop = min(grad.shape[0], start + ctx.rows)
            scale = grad_losses[start:stop, None]
            if grad.dtype == torch.float32:
                grad[start:stop].mul_(scale)
            else:
                grad[start:stop] = grad[start:stop].float().mul_(scale)
        return grad, None, None, None


def token_cross_entropy(logits: torch.Tensor, targets: torch.Tensor,
                        chunk_elements: int = CHUNK_ELEMENTS) -> torch.Tensor:
    """Per-token loss (N,) in fp32 for logits (N, V) and targets (N,); differentiable once in logits."""
    return token_losses(logits, targets, chunk_elements)[0]


def token_losses(logits: torch.Tensor, targets: torch.Tensor, chunk_elements: int = CHUNK_ELEMENTS,
                 z_weight: float = 0.0) -> tuple[torch.Tensor, torch.Tensor]:
    """Per token: the loss (cross-entropy plus z_weight * log(Z)^2), differentiable once in logits, and log(Z)
    (no gradient), both (N,) fp32."""
    if logits.dim() != 2 or targets.shape != logits.shape[:1]:
        raise ValueError(f"logits must be (N, V) and targets (N,); got {tuple(logits.shape)} and {tuple(targets.shape)}")
    rows = max(1, chunk_elements // logits.shape[1])
    return _TokenCrossEntropy.apply(logits, targets, rows, float(z_weight))
