"""The communication plan: the `auto` settings of train (ZeRO stage, gradient accumulation, bucket size) chosen by
the communication model (tasks/train/comm_model.py) from what preflight measured on these ranks.

Measured: the bus bandwidth (nccl-tests' all_reduce across the nodes when it ran, else what the profiled training
steps' own collectives moved in the time they took, else the local torch probe), and the compute time of a sample
(preflight's profiled steps, their wall time less the communication share). With `zero_stage: auto` preflight also
probes what an asynchronous gather hides behind compute and times a few ZeRO-3 steps: what those take beyond what
the model predicts for them is ZeRO-3's own cost, added to every ZeRO-3 candidate. Without a
preflight the plan still settles every `auto`, from rules that need no measurement, and says so.
"""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

from model.comm_profile import PROFILE_FILE
from model.llama import ModelArgs, closed_form_parameters
from model.spec import picked
from pretrain.config import ModelConfig, TrainConfig
from tasks.train.comm_model import (COMM_BOUND_SHARE, DEEPSPEED_BUCKET, Cluster, Layout, ModelSize, bandwidth_from,
                                    best, bucket_candidates, comm_bound, predict)
from tasks.common.hosts import cluster_hosts

PLAN_FILE = "comm_plan.json"
ZERO3_PROFILE_DIR = "profile-zero3"  # under preflight/: the profiled ZeRO-3 steps
LATENCY_S = {"cuda": 50e-6, "cpu": 300e-6}  # per collective; assumed (NCCL ring start-up; gloo over TCP)
FALLBACK_STAGE = 1  # ZeRO-1: least traffic of the partitioned stages (2M a step), right for a model that fits


@dataclass
class Measured:
    busbw_gbps: float
    busbw_source: str
    compute_s_per_sample: float
    compute_source: str
    profile_comm_share: float | None
    async_overlap: float | None = None    # share of an asynchronous gather hidden behind compute (model/overlap_probe)
    zero3: dict | None = None             # preflight's ZeRO-3 steps: step_s and the layout (ranks, grad_accum, bucket)
    optimizer_s: float = 0.0              # the optimizer's update, once a step (preflight's profile)
    reduce_overlap: float | None = None   # share of bucketed inline all-reduces hidden behind compute (the same)


@dataclass
class CommPlan:
    ranks: int
    choice: dict                          # zero_stage, grad_accum, micro_batch, bucket
    rows: list[dict] = field(default_factory=list)  # one per candidate, predicted
    chosen: dict | None = None            # the chosen row
    measured: dict | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def comm_bound(self) -> bool:
        return bool(self.chosen and self.chosen["comm_share"] > COMM_BOUND_SHARE)

    def to_json(self) -> str:
        return json.dumps({**asdict(self), "comm_bound": self.comm_bound}, indent=2)


def ranks_of(train: TrainConfig) -> int:
    hosts = cluster_hosts(train)
    return sum(h.slots for h in hosts) if hosts else train.cluster.num_gpus


def model_size(model: ModelConfig, train: TrainConfig, vocab_rows: int) -> ModelSize:
    args = picked(ModelArgs, model, vocab_size=vocab_rows)
    return ModelSize(closed_form_parameters(args), model.n_layers, model.dim, train.batch.seq_len,
                     2 if train.compute.precision == "bf16" else 4, train.compute.activation_checkpointing)


def measured(preflight_dir: Path) -> Measured | None:
    """The bandwidth and the compute time of a sample from preflight's report and profile; None when either is
    missing (no preflight, a failed check, or comm_profile_steps: 0)."""
    report, profile = preflight_dir / "report.json", preflight_dir / "profile" / PROFILE_FILE
    if not (report.is_file() and profile.is_file()):
        return None
    return measured_from(json.loads(report.read_text())["checks"], json.loads(profile.read_text()),
                         zero3_profile(preflight_dir))


def zero3_profile(preflight_dir: Path) -> dict | None:
    """Preflight's timed ZeRO-3 steps, when it ran them (zero_stage auto on more than one rank)."""
    path = preflight_dir / ZERO3_PROFILE_DIR / PROFILE_FILE
    return json.loads(path.read_text()) if path.is_file() else None


def measured_from(checks: list[dict], profile: dict, zero3_profile: dict | None = None) -> Measured | None:
    """nccl-tests' all_reduce bandwidth when it ran; else the bandwidth the profiled steps' own collectives had
    (on the ranks and links training uses); else the local torch probe's. None without a profile to time a sample."""
    samples = profile.get("samples_per_rank_step") or 0
    if not samples:
        return None
    found = _measured_bandwidth(checks, profile, samples)
    if found is not None:
        found.async_overlap = profile.get("async_overlap")
        found.reduce_overlap = profile.get("reduce_overlap")
        if zero3_profile and zero3_profile.get("steps"):
            found.zero3 = {"step_s": step_seconds(zero3_profile),
                           "ranks": zero3_profile["world_size"], "grad_accum": zero3_profile["grad_accum"],
                           "bucket": zero3_profile.get("bucket") or DEEPSPEED_BUCKET}
    return found


def step_seconds(profile: dict) -> float:
    """A step's wall time as training runs it: the unprofiled steps' where the profile has them (the profiler's own
    cost left out), else the profiled ones' (a profile of an older version)."""
    return profile.get("unprofiled_wall_s", profile["wall_s"]) / profile["steps"]


def _measured_bandwidth(checks: list[dict], profile: dict, samples: int) -> Measured | None:
    # the profiler slows compute and the waits of collectives alike: its share of communication holds, scaled to
    # the step as training runs it
    step_s = step_seconds(profile)
    optimizer_s = step_s * profile.get("optimizer_share", 0.0)  # a profile of an older version has none
    compute = (step_s * (1 - profile["comm_share"]) - optimizer_s) / samples
    source = f"preflight's profiled steps on {profile['world_size']} ranks"
    by_name = {c["name"]: c for c in checks}
    if by_name.get("nccl_tests_all_reduce", {}).get("value"):
        return Measured(by_name["nccl_tests_all_reduce"]["value"], "nccl_tests_all_reduce", compute, source,
                        profile["comm_share"], optimizer_s=optimizer_s)
    if profile.get("params") and profile["world_size"] > 1 and profile["comm_share"] > 0:
        size = ModelSize(profile["params"], 0, 0, 0, profile["bytes_per_param"])
        layout = Layout(profile["zero_stage"], 0, profile["grad_accum"], profile.get("bucket") or DEEPSPEED_BUCKET)
        latency = LATENCY_S["cpu" if "nccl" not in profile.get("backend", "") else "cuda"]
        busbw = bandwidth_from(step_s * profile["comm_share"], size, layout, profile["world_size"], latency)
        return Measured(busbw, source, compute, source, profile["comm_share"], optimizer_s=optimizer_s)
    if by_name.get("allreduce_probe", {}).get("value"):
        return Measured(by_name["allreduce_probe"]["value"], "allreduce_probe", compute, source, profile["comm_share"],
                        optimizer_s=optimizer_s)
    return None


def grad_accum_for(train: TrainConfig, ranks: int) -> int:
    batch = train.batch
    if batch.grad_accum != "auto":
        return batch.grad_accum
    per_step = batch.micro_batch_size * ranks
    if batch.global_batch_size % per_step:
        fits = [g for g in range(per_step, 4 * batch.global_batch_size + 1, per_step)]
        near = min(fits, key=lambda g: abs(g - batch.global_batch_size))
        raise ValueError(f"train.batch.global_batch_size={batch.global_batch_size} is not a multiple of "
                         f"micro_batch_size {batch.micro_batch_size} x {ranks} ranks = {per_step}; set it to {near}, "
                         f"or change train.batch.micro_batch_size so that it divides")
    return batch.global_batch_size // per_step


def candidate_layouts(train: TrainConfig, size: ModelSize, ranks: int) -> list[Layout]:
    cluster = train.cluster
    stages = [1, 2, 3] if cluster.zero_stage == "auto" else [cluster.zero_stage]
    buckets = bucket_candidates(size.params) if cluster.bucket_size == "auto" else [cluster.bucket_size]
    g = grad_accum_for(train, ranks)
    return [Layout(s, train.batch.micro_batch_size, g, b) for s in stages for b in buckets]


def static_bucket(params: int) -> int:
    """Without measurements: the model in 8 buckets (at least 1e6 elements; at most DeepSpeed's 5e8)."""
    return min(500_000_000, max(1_000_000, params // 8))


def make_plan(model: ModelConfig, train: TrainConfig, vocab_rows: int, ranks: int, found: Measured | None,
              memory_gb: float | None = None) -> CommPlan:
    size = model_size(model, train, vocab_rows)
    layouts = candidate_layouts(train, size, ranks)
    if found is None:
        layout = layouts[0]
        stage, bucket = train.cluster.zero_stage, train.cluster.bucket_size
        choice = {"zero_stage": FALLBACK_STAGE if stage == "auto" else stage,
                  "micro_batch": layout.micro_batch, "grad_accum": layout.grad_accum,
                  "bucket": static_bucket(size.params) if bucket == "auto" else bucket}
        notes = ["no preflight measurement (report and profiled steps): auto settings follow the rules "
                 f"ZeRO-{FALLBACK_STAGE} and the model in 8 buckets; run preflight for a measured plan"]
        return CommPlan(ranks, choice, notes=notes)
    notes = [f"bandwidth {found.busbw_gbps:g} GB/s from {found.busbw_source}; {found.compute_s_per_sample * 1e3:.3g} "
             f"ms of compute a sample and {found.optimizer_s * 1e3:.3g} ms of optimizer a step from {found.compute_source}"]
    cluster = measured_cluster(train, ranks, size, found, notes, memory_gb)
    predictions = [predict(size, layout, cluster) for layout in layouts]
    chosen = best(predictions)
    if comm_bound(chosen):
        notes.append(f"communication is {chosen.comm_share:.0%} of the step, above two thirds: more nodes will "
                     f"not make this faster; grow the batch per rank (micro-batch or accumulation) or the model")
    return CommPlan(ranks, layout_choice(chosen.layout), [p.row() for p in predictions], chosen.row(),
                    asdict(found), notes)


def measured_cluster(train: TrainConfig, ranks: int, size: ModelSize, found: Measured, notes: list[str],
                     memory_gb: float | None = None) -> Cluster:
    """The cluster the model predicts for, from what preflight measured; what it takes from each measurement is
    said in notes."""
    accelerator = train.cluster.accelerator
    cluster = Cluster(ranks, found.busbw_gbps, LATENCY_S[accelerator], found.compute_s_per_sample,
                      optimizer_s=found.optimizer_s, overlaps=accelerator == "cuda" and train.cluster.overlap_comm,
                      gather_hidden=found.async_overlap or 0.0, reduce_hidden=found.reduce_overlap or 0.0,
                      memory_gb=memory_gb)
    if found.async_overlap is not None and not cluster.overlaps:
        notes.append(f"preflight's probe hid {found.async_overlap:.0%} of an asynchronous all-gather behind compute: "
                     f"that share of ZeRO-3's prefetched gathers (all but the first bucket) counts as hidden")
    if found.reduce_overlap is not None and not cluster.overlaps:
        notes.append(f"preflight's probe hid {found.reduce_overlap:.0%} of inline all-reduces in buckets behind the "
                     f"compute between them: that share of the gradient reductions the backward pass could hide "
                     f"(all but the last bucket) counts as hidden")
    return with_zero3_cost(cluster, size, train.batch.micro_batch_size, found, notes)


def with_zero3_cost(cluster: Cluster, size: ModelSize, micro_batch: int, found: Measured, notes: list[str]) -> Cluster:
    """The cluster with ZeRO-3's own cost a micro-step: what preflight's ZeRO-3 steps took beyond the model's
    prediction for them (never below 0). Without those steps ZeRO-3 is predicted from its traffic alone."""
    if found.zero3 is None:
        return cluster
    measured_s = found.zero3["step_s"]
    layout = Layout(3, micro_batch, found.zero3["grad_accum"], found.zero3["bucket"])
    predicted = predict(size, layout, replace(cluster, ranks=found.zero3["ranks"])).step_s
    overhead = max(0.0, measured_s - predicted) / layout.grad_accum
    notes.append(f"preflight's ZeRO-3 steps took {measured_s:.3g} s against {predicted:.3g} s their traffic "
                 f"explains: {overhead * 1e3:.3g} ms a micro-step of ZeRO-3's own, counted in every ZeRO-3 layout")
    return replace(cluster, zero3_overhead_s=overhead)


def layout_choice(layout: Layout) -> dict:
    return {"zero_stage": layout.zero_stage, "micro_batch": layout.micro_batch, "grad_accum": layout.grad_accum,
            "bucket": layout.bucket}


def settled(train: TrainConfig, plan: CommPlan) -> TrainConfig:
    """The train settings with every `auto` replaced by the plan's choice."""
    c = plan.choice
    return train.changed(zero_stage=c["zero_stage"], grad_accum=c["grad_accum"], global_batch_size=None,
                         bucket_size=c["bucket"])


def plan_tags(plan: dict) -> dict[str, str]:
    """MLflow tags of a comm_plan.json: the choice, and the prediction when there was a measurement to make one."""
    c, chosen = plan["choice"], plan.get("chosen")
    tags = {"comm_plan": f"ZeRO-{c['zero_stage']}, micro-batch {c['micro_batch']} x {c['grad_accum']} x "
                         f"{plan['ranks']} ranks, buckets of {c['bucket']:,}"}
    if chosen:
        tags["comm_plan.predicted"] = (f"step {chosen['step_s']:.4g} s, communication {chosen['comm_s']:.4g} s "
                                       f"({chosen['comm_share']:.1%} of the step)")
    else:
        tags["comm_plan.predicted"] = "none (no preflight measurement)"
    return tags


def render(plan: CommPlan) -> str:
    """The plan as a table: every candidate predicted, the choice marked."""
    lines = [f"communication plan for {plan.ranks} rank(s)"]
    if plan.rows:
        lines.append(f"  {'zero':>4} {'micro':>5} {'accum':>5} {'bucket':>11} {'step s':>9} {'comm s':>9} "
                     f"{'exposed s':>9} {'comm share':>10} {'GB/rank':>8}")
        for r in plan.rows:
            mark = "*" if r == plan.chosen else " "
            lines.append(f"{mark} {r['zero_stage']:>4} {r['micro_batch']:>5} {r['grad_accum']:>5} {r['bucket']:>11,} "
                         f"{r['step_s']:>9.4g} {r['comm_s']:>9.4g} {r['exposed_comm_s']:>9.4g} "
                         f"{r['comm_share']:>10.1%} {r['memory_gb']:>8.3g}" + ("" if r["fits"] else "  (does not fit)"))
    c = plan.choice
    lines.append(f"choice: ZeRO-{c['zero_stage']}, micro-batch {c['micro_batch']} x {c['grad_accum']} accumulation "
                 f"x {plan.ranks} ranks, buckets of {c['bucket']:,} elements")
    lines += [f"note: {n}" for n in plan.notes]
    return "\n".join(lines)


def plan_launch(model: ModelConfig, train: TrainConfig, tokenizer_dir: Path, out_dir: Path) -> tuple[TrainConfig, CommPlan]:
    """The plan for a launch of the train stage (written to <out_dir>/comm_plan.json) and the settled settings.
    The measurements are those of the preflight of the run root the tokenizer belongs to."""
    vocab_rows = json.loads((tokenizer_dir / "report.json").read_text())["embedding_rows"]
    ranks = ranks_of(train)
    plan = make_plan(model, train, vocab_rows, ranks, measured(tokenizer_dir.parent / "preflight"))
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / PLAN_FILE).write_text(plan.to_json())
    return settled(train, plan), plan
