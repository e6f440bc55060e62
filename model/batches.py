"""The next steps' batches, drawn, read and collated in a background thread while the GPU computes.

The thread owns the sampler and runs ahead of training by `depth` steps; each
batch carries the data position after it, and that, not the sampler's own
state, is what the training program checkpoints: the position of the last
step trained, whatever was read ahead. The order of samples is the sampler's,
so the batches are the ones a synchronous loop would read, and resume stays
exact. On CUDA the tensors are pinned, so the copy to the GPU is asynchronous.

On CPU ranks (read_ahead=False) the batches are read in the training thread:
there the compute runs on the very cores a reader would use, and the thread
only contends for the GIL (benchmarks/train_overhead.py: 0.92x of a bare
DeepSpeed loop with the thread; 0.94x, 1.06x and 1.06x in three runs without it).
"""
from __future__ import annotations

import queue
import threading
from dataclasses import dataclass

import numpy as np
import torch

from model.data import GlobalSampler, SamplerState, TokenDataset, rank_slice


@dataclass
class StepBatch:
    positions: list[int]                          # sampler positions of the global batch (skipped ones left out)
    position_start: int                           # the data position before the batch ...
    state: SamplerState                           # ... and after it
    micro: list[tuple[torch.Tensor, torch.Tensor]]  # this rank's (tokens, per-target channels), one per micro step


def collate(dataset: TokenDataset, ids: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
    """(tokens (B, L+1), channel of each target token (B, L)) of the samples `ids`."""
    items = [dataset[i] for i in ids]
    tokens = torch.from_numpy(np.stack([it["tokens"] for it in items]))
    channels = torch.from_numpy(np.stack([it["channels"][1:] for it in items]))
    return tokens, channels


class _Failed:
    def __init__(self, error: BaseException):
        self.error = error


class BatchPrefetcher:
    def __init__(self, dataset: TokenDataset, sampler: GlobalSampler, rank: int, world: int, micro_batch: int,
                 grad_accum: int, pin_memory: bool = False, depth: int = 2, read_ahead: bool = True,
                 first_step: int = 0, decay_step: int | None = None):
        self.dataset, self.sampler, self.rank, self.world = dataset, sampler, rank, world
        self.step, self.decay_step = first_step, decay_step  # the step the next batch is for; the mix's decay
        self.micro_batch, self.grad_accum, self.pin = micro_batch, grad_accum, pin_memory
        self.ready: queue.Queue = queue.Queue(maxsize=depth)
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self._run, name="batch-prefetch", daemon=True)
        if read_ahead:
            self.thread.start()

    def next(self) -> StepBatch:
        """The next step's batch; an error the reader met (a bad shard) is raised here, in the training loop."""
        if not self.thread.ident:  # not reading ahead
            return self._read_step()
        item = self.ready.get()
        if isinstance(item, _Failed):
            raise item.error
        return item

    def close(self) -> None:
        self.stopping.set()
        while self.thread.ident and self.thread.is_alive():
            try:
                self.ready.get(timeout=0.05)  # unblock a pending put
            except queue.Empty:
                pass
            self.thread.join(timeout=0.05)

    def _run(self) -> None:
        try:
            while not self.stopping.is_set():
                self._put(self._read_step())
        except BaseException as err:  # noqa: BLE001 - handed to the training loop, which raises it
            self._put(_Failed(err))

    def _put(self, item) -> None:
        while not self.stopping.is_set():
            try:
                self.ready.put(item, timeout=0.1)
                return
            except queue.Full:
                continue

    def _read_step(self) -> StepBatch:
        start = self.sampler.state.consumed_samples
        decaying = self.decay_step is not None and self.step >= self.decay_step
        ids = self.sampler.next_global_batch(self.micro_batch * self.world * self.grad_accum, decaying)
        self.step += 1
        state = self.sampler.state.copy()
        per_micro = self.micro_batch * self.world
        micro = [collate(self.dataset, rank_slice(ids[k * per_micro:(k + 1) * per_micro], self.rank, self.world))
                 for k in range(self.grad_accum)]
        if self.pin:
            micro = [(tokens.pin_memory(), channels.pin_memory()) for tokens, channels in micro]
        return StepBatch(list(self.sampler.last_positions), start, state, micro)
