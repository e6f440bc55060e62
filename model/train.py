"""The training program that the DeepSpeed launcher starts on every rank.

    deepspeed --num_gpus N --module model.train --spec <train_dir>/spec.json

It reads the spec (model args, train settings, DeepSpeed config, paths),
resumes from the newest complete checkpoint, trains, writes metrics and
events as JSON lines, logs to MLflow from rank 0, and exits with a code from
model.protocol. It never imports Prefect.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import random
import signal
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist
import torch.nn.functional as F

from model import checkpoint as ckpt
from model.anomaly import Anomaly, AnomalyDetector, DetectorSettings, StepRecord
from model.comm_profile import profile_steps
from model.data import (CHANNELS, DataError, GlobalSampler, SamplerState, TokenDataset, rank_slice, training_dataset,
                        training_sampler)
from model.evaluate import local_eval_sums, reduce_eval
from model.guard import Guard, fault_point
from model.llama import ModelArgs, Transformer, count_parameters, flops_per_token
from model.mirror import Mirror
from model.perf import device_name, memory_gb, mfu, peak_tflops
from model.staging import StagingError, stage_tokens, staged_path
from model.protocol import EVENTS_FILE, EXIT_ANOMALY, EXIT_CONFIG, EXIT_DONE, EXIT_STOPPED, METRICS_FILE
from model.schedule import cosine_lr, wsd_lr
from model.tracking import NullTracker, Rank0Tracker


@dataclass
class Spec:
    model: ModelArgs
    train: dict
    deepspeed: dict
    tokens_dir: Path
    out_dir: Path
    manifest_version: str

    @classmethod
    def load(cls, path: Path) -> "Spec":
        raw = json.loads(Path(path).read_text())
        return cls(ModelArgs(**raw["model"]), raw["train"], raw["deepspeed"], Path(raw["tokens_dir"]),
                   Path(raw["out_dir"]), raw["manifest_version"])


class ResumeMismatch(RuntimeError):
    """The newest checkpoint does not belong to this dataset or model: resuming would be wrong."""


class StopFlag:
    """Set by SIGTERM; ranks agree on it at step boundaries so they stop together."""

    def __init__(self):
        self.requested = False
        signal.signal(signal.SIGTERM, self._handle)

    def _handle(self, signum, frame):
        self.requested = True

    def agreed(self) -> bool:
        flag = torch.tensor([1.0 if self.requested else 0.0])
        dist.all_reduce(flag, op=dist.ReduceOp.MAX)
        return bool(flag.item())


def tokens_dir_for(spec: Spec) -> Path:
    """Where ranks read the shards: in place, or a copy that local rank 0 of each node makes first."""
    stage_root = spec.train.get("stage_data_dir")
    if not stage_root:
        return spec.tokens_dir
    failed = torch.zeros(1)
    if int(os.environ.get("LOCAL_RANK", "0")) == 0:
        try:
            dest = stage_tokens(spec.tokens_dir, Path(stage_root))
            print(f"staged token shards to {dest}", flush=True)
        except (StagingError, OSError) as err:
            print(f"error: staging the token shards failed: {err}", file=sys.stderr, flush=True)
            failed += 1
    dist.all_reduce(failed)  # doubles as the barrier: no rank reads before every node has its copy
    if failed.item():
        raise StagingError(f"staging the token shards to {stage_root} failed on {int(failed.item())} node(s); "
                           f"see their logs")
    from model.data import read_manifest

    return staged_path(Path(stage_root), read_manifest(spec.tokens_dir))


def mixture_plan(dataset: TokenDataset, sampler: GlobalSampler, planned_samples: int) -> str:
    """Per pool: samples, share drawn, and epochs by the end of training (above 1: repeated)."""
    epochs = sampler.epochs_at(planned_samples)
    shares = sampler.blend.shares() if sampler.blend else [1.0]
    return "data pools: " + ", ".join(
        f"{p.name}: {p.num_samples:,} samples, share {shares[j]:.3f}, {epochs.get(j, 0.0):.2f} epochs"
        for j, p in enumerate(dataset.pools))


def lr_at(step: int, t: dict) -> float:
    scale = t.get("lr_scale", 1.0)
    if t.get("schedule", "cosine") == "wsd":
        return scale * wsd_lr(step, lr=t["lr"], min_lr=t["min_lr"], warmup=t["warmup_steps"], total=t["steps"],
                              decay_frac=t.get("decay_frac", 0.2))
    return scale * cosine_lr(step, lr=t["lr"], min_lr=t["min_lr"], warmup=t["warmup_steps"], total=t["steps"])


def batch_tensors(dataset: TokenDataset, ids: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
    items = [dataset[i] for i in ids]
    tokens = torch.from_numpy(np.stack([it["tokens"] for it in items]))
    channels = torch.from_numpy(np.stack([it["channels"][1:] for it in items]))
    return tokens, channels


def step_loss(engine, tokens: torch.Tensor, channels: torch.Tensor, sums: torch.Tensor) -> torch.Tensor:
    """Mean token loss; adds per-channel (loss sum, token count) into `sums`."""
    device = engine.device
    tokens, channels = tokens.to(device), channels.to(device)
    logits = engine(tokens[:, :-1])
    per_token = F.cross_entropy(logits.flatten(0, 1), tokens[:, 1:].flatten(), reduction="none")
    with torch.no_grad():
        flat_ch = channels.flatten()
        for c in range(len(CHANNELS)):
            mask = flat_ch == c
            sums[0, c] += per_token[mask].sum().float().cpu()
            sums[1, c] += mask.sum().float().cpu()
    return per_token.mean()


def rng_state() -> dict:
    state = {"torch": torch.get_rng_state(), "numpy": np.random.get_state(), "python": random.getstate()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state()
    return state


def set_rng_state(state: dict) -> None:
    torch.set_rng_state(state["torch"])
    np.random.set_state(state["numpy"])
    random.setstate(state["python"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state(state["cuda"])


def save(engine, spec: Spec, step: int, sampler: GlobalSampler, tracker, rank: int, world: int,
         mirror: Mirror | None = None) -> str:
    ckpt_dir = spec.out_dir / "checkpoints"
    tag = f"step_{step:08d}"
    meta = {"step": step, "data_position": sampler.state.to_dict(), "manifest_version": spec.manifest_version,
            "model": asdict(spec.model), "world_size": world, "seed": spec.train["seed"]}
    engine.save_checkpoint(str(ckpt_dir), tag=tag, client_state=meta, save_latest=False)
    torch.save(rng_state(), ckpt_dir / tag / f"rng_rank{rank}.pt")
    fault_point("kill_during_save", rank)
    ckpt.mark_rank_done(ckpt_dir, tag, rank)
    dist.barrier()
    if rank == 0:
        ckpt.mark_complete(ckpt_dir, tag, world, meta)
        tracker.event({"event": "checkpoint", "step": step, "tag": tag, "path": str(ckpt_dir / tag)})
        if mirror:
            mirror.submit(ckpt_dir, tag)
        removed = ckpt.apply_retention(ckpt_dir, spec.train.get("keep_last", 3), spec.train.get("keep_every", 0),
                                       mirror.in_flight() if mirror else set())
        if removed:
            tracker.event({"event": "checkpoints_removed", "step": step, "tags": removed})
    dist.barrier()
    return tag


def room_to_save(spec: Spec, model: torch.nn.Module, tracker, rank: int, step: int) -> bool:
    """Rank 0 checks free space against the last checkpoint's size (or an estimate); all ranks get its answer."""
    ok = torch.ones(1)
    if rank == 0:
        ckpt_dir = spec.out_dir / "checkpoints"
        last = ckpt.latest_complete(ckpt_dir)
        # fp32 weights + Adam's two moments + bf16/fp32 copy: ~16 bytes a parameter before the first save
        need = ckpt.checkpoint_bytes(ckpt_dir, last) if last else 16 * count_parameters(model)
        fits, free = ckpt.room_for_checkpoint(ckpt_dir, need)
        if not fits:
            ok.zero_()
            print(f"warning: skipping the checkpoint at step {step}: {free / 1e9:.2f} GB free under {ckpt_dir}, "
                  f"a checkpoint needs about {need / 1e9:.2f} GB; free disk space or lower train.keep_last",
                  file=sys.stderr, flush=True)
            tracker.event({"event": "checkpoint_skipped", "step": step, "reason": "low_disk", "free_bytes": free,
                           "needed_bytes": need})
    dist.all_reduce(ok, op=dist.ReduceOp.MIN)
    return bool(ok.item())


def resume(engine, spec: Spec, rank: int, world: int) -> tuple[int, SamplerState]:
    ckpt_dir = spec.out_dir / "checkpoints"
    named = spec.train.get("resume_tag")
    tag = named or ckpt.latest_complete(ckpt_dir)
    if tag is None:
        return 0, with_skips(SamplerState(), spec.train.get("skip_ranges", []))
    if not ckpt.is_complete(ckpt_dir, tag):
        raise ResumeMismatch(f"train.resume_tag={tag!r} is not a complete checkpoint under {ckpt_dir}; "
                             f"complete ones: {ckpt.complete_tags(ckpt_dir)}")
    meta = ckpt.read_meta(ckpt_dir, tag)
    if meta["manifest_version"] != spec.manifest_version:
        raise ResumeMismatch(f"checkpoint {ckpt_dir / tag} was trained on dataset version {meta['manifest_version']}, "
                             f"the tokens are now version {spec.manifest_version}; use a new run_root, or restore "
                             f"the inputs, tokenizer and tokenize settings it was trained on")
    if meta.get("model", asdict(spec.model)) != asdict(spec.model):
        changed = sorted(f"{k}: {meta['model'].get(k)} -> {v}" for k, v in asdict(spec.model).items()
                         if meta["model"].get(k) != v)
        raise ResumeMismatch(f"checkpoint {ckpt_dir / tag} was trained with a different model ({', '.join(changed)}); "
                             f"use a new run_root or restore the model settings")
    path, _ = engine.load_checkpoint(str(ckpt_dir), tag=tag)
    if path is None:  # DeepSpeed returns (None, None) on a missing tag and would train from scratch
        raise RuntimeError(f"DeepSpeed could not load complete checkpoint {ckpt_dir / tag}")
    rng_file = ckpt_dir / tag / f"rng_rank{rank}.pt"
    if meta.get("world_size") == world and rng_file.is_file():
        set_rng_state(torch.load(rng_file, weights_only=False))
    if rank == 0:
        print(f"resumed from {tag} at step {meta['step']}", flush=True)
    state = SamplerState.from_dict(meta["data_position"])
    return meta["step"], with_skips(state, spec.train.get("skip_ranges", []))


def with_skips(state: SamplerState, ranges) -> SamplerState:
    """The checkpoint's data position plus the skip-ahead ranges of the spec (set by the recovery flow)."""
    merged = sorted({(int(a), int(b)) for a, b in [*state.skipped, *ranges]})
    return SamplerState(state.consumed_samples, merged)


@dataclass
class Loop:
    """What the step loop needs beyond the engine: data, tracking, containment, throughput constants."""
    spec: Spec
    dataset: TokenDataset
    sampler: GlobalSampler
    tracker: object
    guard: Guard
    mirror: Mirror | None
    detector: AnomalyDetector | None
    rank: int
    world: int
    flops_per_token: float
    peak_tflops: float | None

    @property
    def t(self) -> dict:
        return self.spec.train


def train_step(engine, loop: Loop, step: int) -> dict:
    t, micro, accum, world = loop.t, loop.t["micro_batch_size"], loop.t["grad_accum"], loop.world
    t0 = time.perf_counter()
    lr = lr_at(step, t)
    for group in engine.optimizer.param_groups:
        group["lr"] = lr
    position_start = loop.sampler.state.consumed_samples
    batch = loop.sampler.next_global_batch(micro * world * accum)
    poisoned = nan_injected(loop.sampler.last_positions)
    sums = torch.zeros(2, len(CHANNELS))
    loss_total = 0.0
    for k in range(accum):
        ids = rank_slice(batch[k * micro * world:(k + 1) * micro * world], loop.rank, world)
        loss = step_loss(engine, *batch_tensors(loop.dataset, ids), sums)
        if poisoned:
            loss = loss * float("nan")
        engine.backward(loss)
        engine.step()
        loss_total += loss.item() / accum
    dist.all_reduce(sums)
    loss_t = torch.tensor([loss_total])
    dist.all_reduce(loss_t)
    dt = time.perf_counter() - t0
    tokens_per_s = len(batch) * t["seq_len"] / dt
    metrics = {"loss": loss_t.item() / world, "lr": lr, "tokens_per_s": tokens_per_s, "step_time_s": dt,
               "position_start": position_start,
               "consumed_samples": loop.sampler.state.consumed_samples,
               "tflops_per_s": loop.flops_per_token * tokens_per_s / 1e12}
    norm = engine.get_global_grad_norm()
    if norm is not None:
        metrics["grad_norm"] = float(norm)
    for c, name in enumerate(CHANNELS):
        if sums[1, c] > 0:
            metrics[f"loss_{name}"] = (sums[0, c] / sums[1, c]).item()
    return metrics


def nan_injected(positions: list[int]) -> bool:
    """Fault injection: PRETRAIN_NAN_POSITIONS="a-b" makes the loss NaN when a sample of positions [a, b) is trained on."""
    spec = os.environ.get("PRETRAIN_NAN_POSITIONS")
    if not spec:
        return False
    a, b = (int(x) for x in spec.split("-"))
    return any(a <= p < b for p in positions)


def check_anomaly(loop: Loop, step: int, metrics: dict) -> Anomaly | None:
    """Feed the detector this step's global figures; identical on every rank, so every rank agrees."""
    if loop.detector is None:
        return None
    channels = {k.removeprefix("loss_"): v for k, v in metrics.items() if k.startswith("loss_")}
    return loop.detector.update(StepRecord(step, metrics["loss"], metrics.get("grad_norm"), metrics["position_start"],
                                           metrics["consumed_samples"], channels))


def report_step(loop: Loop, step: int, metrics: dict) -> None:
    """Derived figures, the metrics line and the console line; run under the guard."""
    fault_point("metrics", loop.rank)
    util = mfu(loop.flops_per_token, metrics["tokens_per_s"], loop.world, loop.peak_tflops)
    if util is not None:
        metrics["mfu"] = util
    metrics.update(memory_gb())
    loop.tracker.log(step, metrics)
    if loop.rank == 0:
        print(f"step {step}/{loop.t['steps']} loss={metrics['loss']:.4f} lr={metrics['lr']:.2e} "
              f"tok/s={metrics['tokens_per_s']:.0f}" + (f" mfu={util:.1%}" if util is not None else ""), flush=True)


def run_eval(engine, loop: Loop, step: int) -> None:
    def local():
        fault_point("eval", loop.rank)
        return local_eval_sums(engine, loop.dataset, loop.t["micro_batch_size"], loop.rank, loop.world)

    result = reduce_eval(loop.guard.run("eval", local))  # every rank reaches the all-reduce
    if result is None:
        if loop.rank == 0:
            loop.tracker.event({"event": "eval_skipped", "step": step})
        return
    if loop.detector is not None:  # mean log-perplexity: the divergence rule compares eval trends
        loop.detector.observe_eval(step, sum(math.log(v) for v in result.values()) / len(result))
    loop.guard.run("eval metrics", loop.tracker.log, step, result)
    if loop.rank == 0:
        print(f"eval step {step}: " + " ".join(f"{k}={v:.2f}" for k, v in result.items()), flush=True)


def train(spec: Spec) -> int:
    import deepspeed  # imported here so `--help` and spec errors are fast

    t = spec.train
    deepspeed.init_distributed(dist_backend="gloo" if t["accelerator"] == "cpu" else "nccl",
                               timeout=__import__("datetime").timedelta(minutes=t["timeout_minutes"]))
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(t["seed"] + rank)
    dataset = training_dataset(tokens_dir_for(spec), t)  # held-out samples set aside even without eval_every
    model = Transformer(spec.model, activation_checkpointing=t["activation_checkpointing"])
    engine, _, _, _ = deepspeed.initialize(model=model, model_parameters=model.parameters(), config=spec.deepspeed)
    tracker = Rank0Tracker(spec.out_dir, METRICS_FILE, EVENTS_FILE) if rank == 0 else NullTracker()
    start_step, state = resume(engine, spec, rank, world)
    sampler = training_sampler(dataset, t, state)
    mirror = Mirror(t["mirror_url"], tracker.event) if t.get("mirror_url") and rank == 0 else None
    anomaly = t.get("anomaly") or {}
    detector = AnomalyDetector(DetectorSettings.from_dict({k: v for k, v in anomaly.items() if k != "enabled"})) \
        if anomaly.get("enabled", True) else None
    loop = Loop(spec, dataset, sampler, tracker, Guard(tracker.event), mirror, detector, rank, world,
                flops_per_token(spec.model, t["seq_len"]), peak_tflops(device_name(), t.get("peak_tflops_per_gpu")))
    if t.get("profile_steps"):  # preflight's communication profile: measure, write, stop (no checkpoint)
        step = iter(range(start_step, start_step + t["profile_steps"] + 1))
        result = profile_steps(lambda: train_step(engine, loop, next(step)), t["profile_steps"], spec.out_dir, rank)
        if rank == 0:
            print(f"communication share of step time: {result['comm_share']:.1%} ({result['backend']})", flush=True)
        dist.barrier()  # leave together (see the anomaly exit)
        return EXIT_DONE
    stop = StopFlag()
    global_batch = t["micro_batch_size"] * world * t["grad_accum"]
    if rank == 0:
        print(f"params={count_parameters(model):,} samples={len(dataset):,} world={world} "
              f"global_batch={global_batch} start_step={start_step} device={device_name()} "
              f"peak_tflops={loop.peak_tflops}", flush=True)
        print(mixture_plan(dataset, sampler, global_batch * t["steps"]), flush=True)
        if dataset.eval_counts:
            print(f"eval: held-out samples per channel {dataset.eval_counts}, every {t['eval_every']} steps", flush=True)
        tracker.event({"event": "start", "step": start_step, "world_size": world})
    try:
        for step in range(start_step, t["steps"]):
            fault_point(f"crash_at_step_{step + 1}", rank)  # drills: a crash mid-run, after the checkpoints before it
            metrics = train_step(engine, loop, step)
            if (step + 1) % t["log_every"] == 0 or step == start_step:
                loop.guard.run("metrics", report_step, loop, step + 1, metrics)
            found = check_anomaly(loop, step + 1, metrics)
            if found is not None:  # no checkpoint: the recovery rolls back to one from before the trouble
                tracker.event(found.event())
                if rank == 0:
                    print(f"anomaly {found.kind} at step {found.step} ({found.detail}); onset step {found.onset_step}, "
                          f"positions {found.onset_position}..{found.position_end}", flush=True)
                finish(loop)
                dist.barrier()  # leave together: a rank tearing down while another still talks aborts it
                return EXIT_ANOMALY
            if t.get("eval_every") and (step + 1) % t["eval_every"] == 0:
                run_eval(engine, loop, step + 1)
            done = step + 1 == t["steps"]
            if stop.agreed():
                save(engine, spec, step + 1, sampler, tracker, rank, world, mirror)
                tracker.event({"event": "stopped", "step": step + 1, "reason": "SIGTERM"})
                finish(loop)
                return EXIT_STOPPED
            if (done or (step + 1) % t["save_every"] == 0) and room_to_save(spec, model, tracker, rank, step + 1):
                save(engine, spec, step + 1, sampler, tracker, rank, world, mirror)
    except BaseException:
        loop.guard.run("flush", tracker.flush)  # the steps trained before a crash still reach MLflow
        raise
    tracker.event({"event": "done", "step": t["steps"], "callback_errors": loop.guard.failures})
    finish(loop)
    return EXIT_DONE


def finish(loop: Loop) -> None:
    """Uploads in flight get to finish; pending metrics go out."""
    if loop.mirror:
        loop.mirror.wait()
    loop.guard.run("flush", loop.tracker.flush)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--spec", required=True, type=Path, help="spec.json written by the train stage")
    parser.add_argument("--local_rank", type=int, default=None, help="set by the DeepSpeed launcher")
    args = parser.parse_args(argv)
    try:
        spec = Spec.load(args.spec)
    except (OSError, KeyError, TypeError, json.JSONDecodeError) as err:
        print(f"cannot read training spec {args.spec}: {err!r}; rerun the train stage to rewrite it", file=sys.stderr)
        return EXIT_CONFIG
    try:
        return train(spec)
    except (ResumeMismatch, StagingError, DataError) as err:
        print(f"error: {err}", file=sys.stderr, flush=True)
        return EXIT_CONFIG
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()


if __name__ == "__main__":
    sys.exit(main())
