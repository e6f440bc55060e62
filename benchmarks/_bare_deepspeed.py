"""A bare DeepSpeed training loop: the same model, DeepSpeed config and data as a run's spec.json, nothing else.

    deepspeed --num_gpus N benchmarks/_bare_deepspeed.py --spec <train_dir>/spec.json --steps S
Rank 0 prints {"step_seconds": [...]}: wall time between consecutive steps.
"""
import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import deepspeed  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from model.data import TokenDataset  # noqa: E402
from model.llama import Transformer  # noqa: E402
from model.optimizer import with_optimizer  # noqa: E402
from model.spec import Spec  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--spec", required=True)
    parser.add_argument("--steps", type=int, required=True)
    parser.add_argument("--local_rank", type=int, default=None)
    args = parser.parse_args()
    spec = Spec.load(Path(args.spec))
    t = spec.train
    deepspeed.init_distributed(dist_backend="gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(t.seed)
    model = Transformer(spec.model)
    ds_config, _ = with_optimizer(spec.deepspeed, t.optimizer, t.accelerator)
    engine, _, _, _ = deepspeed.initialize(model=model, model_parameters=model.parameters(), config=ds_config)
    data = TokenDataset(spec.data.tokens_dir, spec.data.seq_len)
    micro, accum = t.micro_batch_size, t.grad_accum
    rng = np.random.default_rng(t.seed)
    stamps = [time.perf_counter()]
    for _ in range(args.steps):
        for _ in range(accum):
            ids = rng.integers(0, len(data), micro * world)[rank * micro:(rank + 1) * micro]
            tokens = torch.from_numpy(np.stack([data[int(i)]["tokens"] for i in ids]))
            logits = engine(tokens[:, :-1])
            loss = F.cross_entropy(logits.flatten(0, 1), tokens[:, 1:].flatten())
            engine.backward(loss)
            engine.step()
        stamps.append(time.perf_counter())
    if rank == 0:
        print(json.dumps({"step_seconds": np.diff(stamps).tolist()}), flush=True)


if __name__ == "__main__":
    main()
