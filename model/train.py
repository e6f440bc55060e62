"""The training program that the DeepSpeed launcher starts on every rank.

    deepspeed --num_gpus N --module model.train --spec <train_dir>/spec.json

It reads the spec (model args, train settings, DeepSpeed config, paths),
resumes from the newest complete checkpoint, trains, writes metrics and
events as JSON lines, logs to MLflow from rank 0, and exits with a code from
model.protocol. It never imports Prefect.

The step loop keeps the GPU fed: batches are read ahead in a background thread
(model/batches.py), a step's figures stay on the device, and the ranks agree
through one small collective per step (model/steps.py); figures cross to the
host when a log, eval or save step is due. The anomaly detector sees every
step, in order, at those points; no checkpoint is written before it has seen
every step the checkpoint holds.
"""
from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import signal
import sys
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable

import torch
import torch.distributed as dist

from model.anomaly import Anomaly, AnomalyDetector, StepRecord
from model.batches import BatchPrefetcher
from model.comm import Comm
from model.comm_profile import probed, profile_steps, step_comm_figures
from model.data import (DataError, GlobalSampler, SamplerState, TokenDataset, read_manifest, token_ledger,
                        training_dataset, training_sampler)
from model.ds_import import import_deepspeed
from model.evaluate import local_eval_sums, reduce_eval
from model.guard import Guard, fault_point
from model.llama import Transformer, closed_form_parameters, count_parameters, flops_per_token
from model.mirror import Mirror
from model.optimizer import with_optimizer
from model.overlap_probe import async_overlap, inline_reduce_overlap
from model.perf import device_name, memory_gb, mfu, peak_tflops
from model.process_exit import exit_without_teardown
from model.safe_load import force_weights_only
from model.spec import Spec, TrainSpec
from model.checkpoint import latest_complete
from model.protocol import (EVENTS_FILE, EXIT_ANOMALY, EXIT_CONFIG, EXIT_DONE, EXIT_STOPPED, EXIT_UNSAVED,
                            EXIT_UNUSABLE, METRICS_FILE, MIRROR_URL_ENV, forget_secrets, load_secrets)
from model.staging import StagingError, stage_tokens, staged_path
from model.steps import PendingStep, agree, grad_norms, reduce_stats, step_metrics, train_step
from model.straggler import StragglerWatch, rank_figures
from model.tracking import NullTracker, Rank0Tracker
from model.reshape import ReshapeUnsupported
from model.train_state import CheckpointUnusable, ResumeMismatch, find_resume_point, resume, room_to_save, save
from model.watchdog import HangWatch


class StopFlag:
    """Set by SIGTERM, or when the launcher that started this rank is gone; the ranks agree on it in the step's
    collective, so they stop together, after saving a checkpoint.

    The launcher check matters because a launcher can go without passing anything on (killed outright, or
    DeepSpeed's `deepspeed` command, which does not pass SIGTERM on): its ranks would train on, orphaned. A rank's
    parent is DeepSpeed's per-node `launch` process, whose parent is the train stage (one node), the `deepspeed`
    command or the shell ssh started: when either goes, its child is re-parented.
    """

    def __init__(self, poll_s: float = 2.0):
        self.requested, self.reason = False, None
        signal.signal(signal.SIGTERM, self._handle)
        self._watch_launcher(poll_s)

    def _handle(self, signum, frame):
        self.requested, self.reason = True, "SIGTERM"

    def _watch_launcher(self, poll_s: float) -> None:
        import psutil

        try:
            self._parent = psutil.Process(os.getppid())
            self._grandparent = self._parent.ppid()
        except psutil.Error:
            return

        def watch() -> None:
            while not self.requested:
                time.sleep(poll_s)
                # a killpg reaches the launcher and its ranks together: the SIGTERM, handled during the sleep, is the cause
                if not self.requested and self.launcher_gone():
                    self.requested, self.reason = True, "launcher gone"

        self.watch_thread = threading.Thread(target=watch, name="launcher-watch", daemon=True)
        self.watch_thread.start()

    def launcher_gone(self) -> bool:
        import psutil

        if not hasattr(self, "_parent"):
            return False
        try:
            return os.getppid() != self._parent.pid or self._parent.ppid() != self._grandparent
        except psutil.Error:
            return True

    def cause(self) -> str:
        """Why the ranks stop, as this rank knows it: another rank may have noticed first."""
        return self.reason or ("launcher gone" if self.launcher_gone() else "another rank")


def tokens_dir_for(spec: Spec, comm: Comm) -> Path:
    """Where ranks read the shards: in place, or a copy that local rank 0 of each node makes first."""
    stage_root = spec.data.stage_data_dir
    tokens_dir = Path(spec.data.tokens_dir)
    if not stage_root:
        return tokens_dir
    failed = 0.0
    if int(os.environ.get("LOCAL_RANK", "0")) == 0:
        try:
            dest = stage_tokens(tokens_dir, Path(stage_root))
            print(f"staged token shards to {dest}", flush=True)
        except (StagingError, OSError) as err:
            print(f"error: staging the token shards failed: {err}", file=sys.stderr, flush=True)
            failed = 1.0
    failed_nodes = comm.agree([failed])[0]  # doubles as the barrier: no rank reads before every node has its copy
    if failed_nodes:
        raise StagingError(f"staging the token shards to {stage_root} failed on {int(failed_nodes)} node(s); "
                           f"see their logs")
    return staged_path(Path(stage_root), read_manifest(tokens_dir))


def mixture_plan(dataset: TokenDataset, sampler: GlobalSampler, planned_samples: int,
                 decay_from: int | None = None) -> str:
    """Per pool: samples, share drawn (in the decay too, when the mix changes there), and epochs by the end of
    training (above 1: repeated); `decay_from`: the planned position of the decay's first sample."""
    epochs = sampler.epochs_at(planned_samples, decay_from)
    shares = sampler.blend.shares() if sampler.blend else [1.0]
    decay = sampler.decay_blend.shares() if sampler.decay_blend and decay_from is not None else None
    return "data pools: " + ", ".join(
        f"{p.name}: {p.num_samples:,} samples, share {shares[j]:.3f}"
        + (f" (decay {decay[j]:.3f})" if decay is not None else "") + f", {epochs.get(j, 0.0):.2f} epochs"
        for j, p in enumerate(dataset.pools))


@dataclass
class Loop:
    """What the step loop needs beyond the engine: data, tracking, containment, throughput constants."""
    spec: Spec
    dataset: TokenDataset
    batches: BatchPrefetcher
    tracker: object
    guard: Guard
    mirror: Mirror | None
    detector: AnomalyDetector | None
    comm: Comm
    first_step: int
    position: SamplerState          # the data position after the last trained step: what a checkpoint records
    flops_per_token: float
    peak_tflops: float | None
    pending: list[PendingStep] = field(default_factory=list)
    watch: HangWatch | None = None
    stragglers: StragglerWatch | None = None
    ledger: Callable[[SamplerState], dict] | None = None  # tokens trained per pool (and phase) up to a position

    @property
    def t(self) -> TrainSpec:
        return self.spec.train

    @property
    def rank(self) -> int:
        return self.comm.rank

    def logged(self, step: int) -> bool:
        return step % self.t.log_every == 0 or step == self.first_step + 1

    def eval_due(self, step: int) -> bool:
        return bool(self.t.eval_every) and step % self.t.eval_every == 0

    def save_due(self, step: int) -> bool:
        return (step == self.t.steps and self.t.save_final) or step % self.t.save_every == 0

    def figures_due(self, step: int) -> bool:
        """The pending figures must reach the host: to be logged, or before an eval or a checkpoint."""
        return self.logged(step) or self.eval_due(step) or self.save_due(step)


def check_anomaly(loop: Loop, step: int, metrics: dict) -> Anomaly | None:
    """Feed the detector a step's global figures; identical on every rank, so every rank agrees."""
    if loop.detector is None:
        return None
    channels = {k.removeprefix("loss_"): v for k, v in metrics.items() if k.startswith("loss_")}
    return loop.detector.update(StepRecord(step, metrics["loss"], metrics.get("grad_norm"), metrics["position_start"],
                                           metrics["consumed_samples"], channels))


def report_step(loop: Loop, step: int, metrics: dict) -> None:
    """Derived figures, the metrics line and the console line; run under the guard."""
    fault_point("metrics", loop.rank)
    util = mfu(loop.flops_per_token, metrics["tokens_per_s"], loop.comm.world, loop.peak_tflops)
    if util is not None:
        metrics["mfu"] = util
    metrics.update(memory_gb())
    loop.tracker.log(step, metrics)
    if loop.rank == 0:
        print(f"step {step}/{loop.t.steps} loss={metrics['loss']:.4f} lr={metrics['lr']:.2e} "
              f"tok/s={metrics['tokens_per_s']:.0f}" + (f" mfu={util:.1%}" if util is not None else ""), flush=True)


def drain(loop: Loop, reduced: list[list[float]], rank_own_s: list[float] | None = None) -> Anomaly | None:
    """The pending steps, in order, on the host: each goes to the detector, the due ones to the metrics;
    stops at the first anomaly. Each rank's own time (over the pending steps) rides on the newest step's line."""
    norms = grad_norms(loop.pending)
    found = None
    for p, figures, norm in zip(loop.pending, reduced, norms):
        metrics = step_metrics(p, figures, norm, loop.comm.world, loop.spec.data.seq_len, loop.flops_per_token)
        if rank_own_s and p is loop.pending[-1]:
            metrics.update(rank_figures(rank_own_s))
        if loop.ledger and p.state and loop.logged(p.step):
            metrics.update(loop.ledger(p.state))
            watch_stragglers(loop, p.step, rank_own_s)
        if loop.logged(p.step):
            loop.guard.run("metrics", report_step, loop, p.step, metrics)
        found = check_anomaly(loop, p.step, metrics)
        if found is not None:
            break
    loop.pending.clear()
    return found


def watch_stragglers(loop: Loop, step: int, rank_own_s: list[float]) -> None:
    if loop.stragglers is None:
        return
    for event in loop.stragglers.observe(step, rank_own_s):
        loop.tracker.event(event)
        loop.guard.run("straggler tag", loop.tracker.tag, f"straggler.rank{event['rank']}",
                       f"step {step}: {event['ratio']}x the median rank's own time")
        if loop.rank == 0:
            print(f"warning: rank {event['rank']} is a straggler: its own time per step (data + forward) has been "
                  f"{event['ratio']}x the median of all ranks for {event['reports']} logged steps "
                  f"({event['own_s']:.3f} s vs {event['median_own_s']:.3f} s); its host is in "
                  f"heartbeats/rank{event['rank']}.json", flush=True)


def run_eval(engine, loop: Loop, step: int) -> None:
    def local():
        fault_point("eval", loop.rank)
        return local_eval_sums(engine, loop.dataset, loop.t.micro_batch_size, loop.rank, loop.comm.world)

    result = reduce_eval(loop.comm, loop.guard.run("eval", local))  # every rank reaches the all-reduce
    if result is None:
        if loop.rank == 0:
            loop.tracker.event({"event": "eval_skipped", "step": step})
        return
    if loop.detector is not None:  # mean log-perplexity: the divergence rule compares eval trends
        loop.detector.observe_eval(step, sum(math.log(v) for v in result.values()) / len(result))
    loop.guard.run("eval metrics", loop.tracker.log, step, result)
    if loop.rank == 0:
        print(f"eval step {step}: " + " ".join(f"{k}={v:.2f}" for k, v in result.items()), flush=True)


def one_step(engine, loop: Loop, step: int, stop: StopFlag | None) -> tuple[bool, Anomaly | None]:
    """Train a step and agree on it: (a rank asked to stop, an anomaly the detector found)."""
    every = loop.t.comm_profile_every
    with probed(bool(every) and (step + 1) % every == 0 and stop is not None) as found:
        pending, loop.position = train_step(engine, loop.batches, loop.t, step, loop.spec.overrides.lr_scale)
        loop.pending.append(pending)
        requested = stop is not None and stop.requested  # read after the step: a SIGTERM during it stops after it
        agreed = agree(loop.comm, loop.pending, requested, loop.figures_due(step + 1))
    pending.seconds = time.perf_counter() - pending.started
    if found:
        pending.comm = step_comm_figures(found, loop.comm, loop.spec.comm_prediction)
    reduced = agreed.stats
    if reduced is None and (agreed.loss_not_finite or agreed.stop_requested):
        reduced = reduce_stats(loop.comm, loop.pending)  # judged before anything else happens
    return agreed.stop_requested, (drain(loop, reduced, agreed.rank_own_s) if reduced is not None else None)


def run_steps(engine, loop: Loop, model: torch.nn.Module, stop: StopFlag) -> int:
    t, mirror, saved = loop.t, loop.mirror, True
    for step in range(loop.first_step, t.steps):
        fault_point(f"crash_at_step_{step + 1}", loop.rank)  # drills: a crash mid-run, after the checkpoints before it
        fault_point(f"hang_at_step_{step + 1}", loop.rank)  # drills: a rank that never comes back
        stopping, found = one_step(engine, loop, step, stop)
        if loop.watch:
            loop.watch.beat(step + 1)
        if found is not None:  # no checkpoint: the recovery rolls back to one from before the trouble
            loop.tracker.event(found.event())
            if loop.rank == 0:
                print(f"anomaly {found.kind} at step {found.step} ({found.detail}); onset step {found.onset_step}, "
                      f"positions {found.onset_position}..{found.position_end}", flush=True)
            finish(loop)
            return EXIT_ANOMALY
        if loop.eval_due(step + 1):
            slow_phase(loop, "eval")
            run_eval(engine, loop, step + 1)
        if stopping or loop.save_due(step + 1):
            slow_phase(loop, "save")
        if stopping:
            save(engine, loop.spec, step + 1, loop.position, loop.tracker, loop.comm, mirror)
            loop.tracker.event({"event": "stopped", "step": step + 1, "reason": stop.cause()})
            finish(loop)
            return EXIT_STOPPED
        if loop.save_due(step + 1):
            saved = room_to_save(loop.spec, model, loop.tracker, loop.comm, step + 1)
            if saved:
                save(engine, loop.spec, step + 1, loop.position, loop.tracker, loop.comm, mirror)
    if not saved:  # the last step's checkpoint did not fit: the end of the work is not durable, and not a success
        durable = latest_complete(loop.spec.out_dir / "checkpoints")
        loop.tracker.event({"event": "done_unsaved", "step": t.steps, "last_durable_checkpoint": durable,
                            "reason": "low_disk"})
        finish(loop)
        return EXIT_UNSAVED
    loop.tracker.event({"event": "done", "step": t.steps, "callback_errors": loop.guard.failures})
    finish(loop)
    return EXIT_DONE


def slow_phase(loop: Loop, name: str) -> None:
    if loop.watch:
        loop.watch.slow_phase(name)


def profile_run(engine, loop: Loop) -> int:
    """Preflight's communication profile: a few steps as training runs them (each with its agreement), no checkpoint."""
    profiled = loop.spec.overrides.profile_steps
    steps = iter(range(loop.first_step, loop.first_step + 2 * profiled + 1))  # see profile_steps

    def run_step():
        one_step(engine, loop, next(steps), None)
        loop.pending.clear()

    ds = loop.spec.deepspeed
    layout = {"samples_per_rank_step": loop.t.micro_batch_size * loop.t.grad_accum, "grad_accum": loop.t.grad_accum,
              "params": closed_form_parameters(loop.spec.model), "zero_stage": ds["zero_optimization"]["stage"],
              "bytes_per_param": 2 if ds["bf16"]["enabled"] else 4,
              "bucket": ds["zero_optimization"].get("reduce_bucket_size")}
    if loop.comm.world > 1:  # what ZeRO-3's prefetched gathers and bucketed reductions hide, for the plan
        layout["async_overlap"] = async_overlap(loop.comm, layout["params"] * layout["bytes_per_param"])
        layout["reduce_overlap"] = inline_reduce_overlap(loop.comm, layout["params"] * layout["bytes_per_param"])
    result = profile_steps(run_step, profiled, loop.spec.out_dir, loop.comm, layout)
    if loop.rank == 0:
        print(f"communication share of step time: {result['comm_share']:.1%} ({result['backend']})", flush=True)
    loop.comm.barrier()  # leave together (see the anomaly exit)
    return EXIT_DONE


def announce(loop: Loop, model: torch.nn.Module, sampler: GlobalSampler, optimizer: str) -> None:
    t, world = loop.t, loop.comm.world
    global_batch = t.micro_batch_size * world * t.grad_accum
    if loop.rank == 0:
        print(f"params={count_parameters(model):,} samples={len(loop.dataset):,} world={world} "
              f"global_batch={global_batch} start_step={loop.first_step} device={device_name()} "
              f"peak_tflops={loop.peak_tflops} backend={loop.comm.backend} comm_device={loop.comm.device}", flush=True)
        print(f"optimizer: {optimizer}", flush=True)
        decay_from = sampler.state.decay_from
        if decay_from is None and loop.spec.data.decay_step is not None:  # planned: no skips from here on
            decay_from = sampler.state.consumed_samples + global_batch * (loop.spec.data.decay_step - loop.first_step)
        print(mixture_plan(loop.dataset, sampler, global_batch * t.steps, decay_from), flush=True)
        if loop.dataset.eval_counts:
            print(f"eval: held-out samples per channel {loop.dataset.eval_counts}, every {t.eval_every} steps",
                  flush=True)
    loop.tracker.event({"event": "start", "step": loop.first_step, "world_size": world, "optimizer": optimizer,
                        "backend": loop.comm.backend})


def train(spec: Spec) -> int:

    deepspeed = import_deepspeed()  # here, so that `--help` and spec errors are fast

    t = spec.train
    force_weights_only()  # checkpoints on shared storage are data: DeepSpeed's loads too run no pickled code
    deepspeed.init_distributed(dist_backend="gloo" if t.accelerator == "cpu" else "nccl",
                               timeout=datetime.timedelta(minutes=t.timeout_minutes))
    comm = Comm.current()
    comm.barrier()  # every rank has read the secrets file (main, before the spec): it need not outlive this
    if comm.rank == 0:
        forget_secrets()
    # watched from here: loading data, building the model, resuming and compiling count against the first step
    watch = HangWatch(spec.out_dir, comm.rank, comm.world, t.hang_timeout_s, t.slow_phase_timeout_s,
                      first_step_timeout_s=t.first_step_timeout_s)
    batches = None
    try:
        torch.manual_seed(t.seed + comm.rank)
        # held-out samples set aside even without eval_every
        dataset = training_dataset(tokens_dir_for(spec, comm), spec.data)
        model = build_model(spec, comm)
        ds_config, optimizer = with_optimizer(spec.deepspeed, t.optimizer, t.accelerator)
        point = find_resume_point(spec, comm)
        if point and point.reshaped:
            ds_config = {**ds_config, "checkpoint": {"load_universal": True}}
        engine, _, _, _ = deepspeed.initialize(model=model, model_parameters=model.parameters(), config=ds_config)
        tracker = Rank0Tracker(spec.out_dir, METRICS_FILE, EVENTS_FILE) if comm.rank == 0 else NullTracker()
        start_step, state = resume(engine, spec, comm, point)
        if point and point.reshaped:
            tracker.event({"event": "reshaped", "step": start_step, "tag": point.tag,
                           "saved": asdict(point.saved), "now": asdict(point.now),
                           "saved_global_batch": point.meta.get("global_batch"),
                           "global_batch": t.micro_batch_size * t.grad_accum * comm.world})
        sampler = training_sampler(dataset, spec.data, state)
        on_gpu = comm.device.type == "cuda"
        batches = BatchPrefetcher(dataset, sampler, comm.rank, comm.world, t.micro_batch_size, t.grad_accum,
                                  pin_memory=on_gpu, read_ahead=on_gpu, first_step=start_step,
                                  decay_step=spec.data.decay_step)
        mirror_url = os.environ.get(MIRROR_URL_ENV) or t.mirror_url  # the spec's copy has no password
        mirror = Mirror(mirror_url, tracker.event) if mirror_url and comm.rank == 0 else None
        detector = AnomalyDetector(spec.anomaly) if spec.anomaly else None
        loop = Loop(spec, dataset, batches, tracker, Guard(tracker.event), mirror, detector, comm, start_step,
                    state, flops_per_token(spec.model, spec.data.seq_len),
                    peak_tflops(device_name(), t.peak_tflops_per_gpu), watch=watch)
        try:
            if spec.overrides.profile_steps:
                return profile_run(engine, loop)
            loop.stragglers = StragglerWatch(t.straggler_ratio, t.straggler_reports)
            pools = [p.name for p in dataset.pools]
            loop.ledger = lambda state: token_ledger(sampler, state, pools, spec.data.seq_len)
            announce(loop, model, sampler, optimizer)
            return run_steps(engine, loop, model, StopFlag())
        except BaseException:
            loop.guard.run("flush", tracker.close, 30.0)  # the steps trained before a crash still reach MLflow
            raise
    finally:
        watch.close()
        if batches is not None:
            batches.close()


def build_model(spec: Spec, comm: Comm) -> torch.nn.Module:
    """The model on its device, its attention kernel chosen and its blocks compiled as the spec says."""
    t = spec.train
    if t.sdpa_backend != "auto":  # only that kernel: a shape it cannot run fails instead of falling back
        only = "mem_efficient" if t.sdpa_backend == "efficient" else t.sdpa_backend
        for name in ("flash", "mem_efficient", "math"):
            getattr(torch.backends.cuda, f"enable_{name}_sdp")(name == only)
    with torch.device(comm.device):  # initialized where it trains: seconds for 500M parameters on a GPU, not tens
        model = Transformer(spec.model, activation_checkpointing=t.activation_checkpointing)
    if t.compile:  # in place, block by block: the state dict keeps its names, so checkpoints and export are unchanged
        for layer in model.layers:
            layer.compile(backend=t.compile_backend)
    return model


def finish(loop: Loop) -> None:
    """The ranks end their collective work together: a rank that tears its process group down while another is
    still inside one aborts ("terminate called without an active exception", seen on rank 1 at the end of a
    resumed run). Then uploads in flight get to finish (on rank 0 alone, however long) and metrics go out."""
    loop.comm.barrier()
    if loop.mirror:
        loop.mirror.wait()
    loop.guard.run("flush", loop.tracker.close)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--spec", required=True, type=Path, help="spec.json written by the train stage")
    parser.add_argument("--local_rank", type=int, default=None, help="set by the DeepSpeed launcher")
    args = parser.parse_args(argv)
    try:
        load_secrets()
        spec = Spec.load(args.spec)
    except (OSError, KeyError, TypeError, json.JSONDecodeError) as err:
        print(f"cannot read training spec {args.spec} or its secrets: {type(err).__name__}: {err}; rerun the train "
              f"stage to rewrite them", file=sys.stderr)
        return EXIT_CONFIG
    try:
        return train(spec)
    except (ResumeMismatch, ReshapeUnsupported, StagingError, DataError) as err:
        print(f"error: {err}", file=sys.stderr, flush=True)
        return EXIT_CONFIG
    except CheckpointUnusable as err:
        print(f"error: {err}", file=sys.stderr, flush=True)
        return EXIT_UNUSABLE
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()


if __name__ == "__main__":
    exit_without_teardown(main())
