"""The train section, by topic: batch, optimizer (and schedule), compute, cluster (hosts, launch, ZeRO), checkpoint
(and mirror), watch, data (order, mixture); anomaly and recovery beside them."""
from __future__ import annotations

import re
from typing import Literal
from urllib.parse import urlsplit

from pydantic import Field, PositiveInt, field_validator, model_validator

from pretrain.config.base import NO_EFFECT, Strict


HOST_NAME = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,252}$"


def check_host(name: str, where: str) -> str:
    """A host name or IPv4 address, nothing a shell or ssh would read as an option or a command."""
    if not re.fullmatch(HOST_NAME, name):
        raise ValueError(f"{where}={name!r} is not a host name (letters, digits, '.', '-' and '_', starting with a "
                         f"letter or digit): ssh would read it as an option or the shell as a command; fix the name")
    return name


class HostConfig(Strict):
    name: str = Field(description="hostname or address the launcher reaches the node by")
    slots: int = Field(gt=0, description="ranks (GPUs) on the node")

    @field_validator("name")
    @classmethod
    def _host_name(cls, name: str) -> str:
        return check_host(name, "train.cluster.hosts[].name")


class MixtureConfig(Strict):
    """Sampling proportions of the training data by channel, source or quality (upsampling repeats a pool)."""
    by: Literal["channel", "source", "quality"] = Field("channel", description="what the weights name: channels "
                                                         "(zh/en/code/other), source names, or qualities: clean (no "
                                                         "rule in tag mode flagged the document) or the family of "
                                                         "the first rule that did (e.g. chinese, c4, dirty)")
    weights: dict[str, float] = Field(min_length=1, description="share of samples drawn per channel or source; "
                                      "unnamed ones are not drawn; normalized to sum 1")
    decay_weights: dict[str, float] | None = Field(None, description="the shares from the first step of the "
                                                   "schedule's decay (schedule: wsd) to the end, for annealing on "
                                                   "higher-quality or domain data; None: weights throughout")

    @model_validator(mode="after")
    def _positive(self) -> "MixtureConfig":
        for key, weights in (("weights", self.weights), ("decay_weights", self.decay_weights)):
            if weights is not None and (any(v < 0 for v in weights.values()) or sum(weights.values()) <= 0):
                raise ValueError(f"train.data.mixture.{key} {weights} must be non-negative with a positive sum")
        return self


class AnomalyConfig(Strict):
    """Loss-anomaly detection in the training program (model/anomaly.py); on a hit it writes an event and exits 42."""
    enabled: bool = True
    window: int = Field(50, ge=2, description="steps of history the rules compare against")
    warmup: int = Field(20, ge=1, description="steps of history before the spike rules apply")
    loss_ratio: float = Field(2.0, gt=1, description="loss above this x the rolling median is a spike")
    loss_zscore: float = Field(6.0, gt=0, description="loss this many robust standard deviations (1.4826 x MAD) "
                               "above the window median is a spike")
    grad_ratio: float = Field(10.0, gt=1, description="grad norm above this x its rolling median is an explosion")
    channel_ratio: float = Field(2.5, gt=1, description="a channel's loss above this x its own median is a spike")
    patience: int = Field(1, ge=1, description="consecutive offending steps before acting (non-finite acts at once)")
    divergence_window: int = Field(0, ge=0, description="train and eval loss both rising over this many steps (0: off)")
    onset_grad_ratio: float = Field(2.0, gt=1, description="grad norm above this x median marks the onset of trouble")


class RecoveryConfig(Strict):
    """What the monitored training does when an attempt ends early (tasks/train/recovery.py)."""
    enabled: bool = Field(True, description="relaunch after anomalies and crashes; off: the first failure fails the stage")
    rollback_gap_steps: int = Field(100, ge=0, description="roll back to a checkpoint at least this many steps before the onset")
    skip_margin_steps: int = Field(200, ge=0, description="skip the data up to this many steps' worth past the anomaly")
    widen_factor: int = Field(2, ge=1, description="the same region again: the margin grows by this factor each time")
    lr_factor: float = Field(0.5, gt=0, le=1, description="a third spike in one region: the learning rate is multiplied by this")
    max_rollbacks: int = Field(5, ge=0, description="then the flow fails with a report for a person")
    max_crash_retries: int = Field(3, ge=0, description="resumes after crashes that are not anomalies (a killed rank, a lost node)")
    drop_lost_nodes: bool = Field(True, description="before each relaunch, probe the nodes (as preflight does) and "
                                  "leave out those that fail: training goes on from the last complete checkpoint on "
                                  "the ranks left (with grad_accum: auto, at the same global batch)")
    keep_abandoned: int = Field(1, ge=0, description="checkpoints set aside by rollbacks (<tag>.abandoned-<n>) that are "
                                "kept, newest first; older ones are deleted (each is as large as a live checkpoint)")


def mirror_target(url: str) -> str:
    """The mirror URL as fsspec will read it, or an error naming the problem: a file URL takes a local absolute
    path and no user, password or host (fsspec would read file://user:pw@host/x as a folder named
    "user:pw@host/x" in the working directory); a path without a scheme must be absolute."""

    parts = urlsplit(url)
    if not parts.scheme:
        if not url.startswith("/"):
            raise ValueError(f"{url!r} is a relative path, which would land under whatever folder "
                             f"the job starts in; give an absolute path or a URL (file:///backup/run, s3://bucket/run)")
        return url
    if parts.scheme != "file":
        return url
    if parts.username or parts.password or parts.netloc not in ("", "localhost"):
        raise ValueError(f"{_redacted(url)!r}: a file:// URL takes a local path and no user, "
                         f"password or host; write file:///<absolute path>; for another machine use its protocol "
                         f"(sftp://user:password@host/path: the password reaches the ranks by the secrets file)")
    if not parts.path.startswith("/") or parts.path == "/":
        raise ValueError(f"{url!r} needs an absolute folder: file:///backup/run")
    return f"file://{parts.path}"


def _redacted(url: str) -> str:
    return re.sub(r"//[^/@]*@", "//***@", url)


class BatchConfig(Strict):
    """How many samples make a step: per rank, per micro step, per optimizer step."""
    seq_len: int = Field(gt=0)
    micro_batch_size: int = Field(gt=0, description="samples per rank per micro step")
    grad_accum: PositiveInt | Literal["auto"] = Field(1, description="micro steps per optimizer step; auto: "
                                                       "train.batch.global_batch_size / (micro_batch_size x ranks), so the "
                                                       "batch stays when the number of ranks changes")
    global_batch_size: PositiveInt | None = Field(None, description="samples per optimizer step, with grad_accum: "
                                                  "auto; a multiple of micro_batch_size x ranks")

    @model_validator(mode="after")
    def _one_batch_rule(self) -> "BatchConfig":
        if self.grad_accum == "auto" and self.global_batch_size is None:
            raise ValueError("train.batch.grad_accum: auto needs train.batch.global_batch_size (samples per optimizer "
                             "step)")
        if self.grad_accum != "auto" and self.global_batch_size is not None:
            raise ValueError(f"train.batch.global_batch_size={self.global_batch_size} with train.batch.grad_accum="
                             f"{self.grad_accum}: set train.batch.grad_accum: auto to derive it, or drop "
                             f"global_batch_size")
        if self.global_batch_size is not None and self.global_batch_size % self.micro_batch_size:
            raise ValueError(f"train.batch.global_batch_size={self.global_batch_size} is not a multiple of "
                             f"train.batch.micro_batch_size={self.micro_batch_size}")
        return self


class OptimizerConfig(Strict):
    """AdamW, its learning-rate schedule and the loss's z-term."""
    lr: float = Field(3e-4, gt=0)
    min_lr: float = Field(3e-5, ge=0)
    warmup_steps: int = Field(10, ge=0)
    weight_decay: float = Field(0.1, ge=0)
    grad_clip: float = Field(1.0, gt=0)
    schedule: Literal["cosine", "wsd"] = Field("cosine", description="cosine decay, or warmup-stable-decay (constant, then a final decay)")
    decay_frac: float = Field(0.2, gt=0, le=1, description="wsd: share of the steps spent decaying at the end")
    decay_steps: int | None = Field(None, gt=0, description="wsd: decay over exactly this many final steps "
                                    "instead of decay_frac (anneal branches set it); None: decay_frac")
    z_loss: float = Field(1e-4, ge=0, le=1, description="weight of z-loss, log(Z)^2 per token, in the trained loss: "
                          "keeps the output logits from drifting (logged as log_z, z_loss; `loss` stays the "
                          "cross-entropy); 0: off. Default from benchmarks/z_loss.py")
    implementation: Literal["auto", "torch_fused", "deepspeed_fused"] = Field(
        "auto", description="AdamW on GPUs: torch_fused = torch's fused CUDA AdamW (no compiler needed); "
        "deepspeed_fused = DeepSpeed's FusedAdam (compiled with nvcc on first use unless DeepSpeed was installed "
        "with DS_BUILD_FUSED_ADAM=1); auto = DeepSpeed's when prebuilt, else torch's. CPU: torch's AdamW")

    @model_validator(mode="after")
    def _lr_order(self) -> "OptimizerConfig":
        if self.min_lr > self.lr:
            raise ValueError(f"train.optimizer.min_lr={self.min_lr} is above train.optimizer.lr={self.lr}; "
                             f"lower train.optimizer.min_lr")
        return self


class ComputeConfig(Strict):
    """How each rank computes a step: number format, recomputation, compiled blocks, attention kernel."""
    precision: Literal["fp32", "bf16"] = "bf16"
    activation_checkpointing: bool = False
    compile: bool = Field(False, description="torch.compile each transformer block (in place: checkpoints and the "
                          "HF export are unchanged); the first steps pay for the compilation", json_schema_extra=NO_EFFECT)
    compile_backend: Literal["inductor", "aot_eager", "eager"] = Field(
        "inductor", description="train.compute.compile's torch.compile backend: inductor generates fused kernels; aot_eager "
        "and eager only capture the graphs (graph breaks and errors show without the compile time)",
        json_schema_extra=NO_EFFECT)
    sdpa_backend: Literal["auto", "flash", "efficient", "math"] = Field(
        "auto", description="attention kernel on GPUs: auto = PyTorch's choice (flash for bf16 on Ampere and "
        "newer); flash / efficient / math = only that one, so a shape it cannot run is an error instead of a "
        "silent fallback", json_schema_extra=NO_EFFECT)


class ClusterConfig(Strict):
    """Where the ranks run, how they are launched and how they communicate (ZeRO and its buckets)."""
    accelerator: Literal["cpu", "cuda"] = Field("cuda", description="cpu: DS_ACCELERATOR=cpu with gloo")
    num_gpus: int = Field(1, gt=0, description="ranks per node (CPU processes when accelerator=cpu)")
    hostfile: str | None = Field(None, description="DeepSpeed hostfile for multi-node runs; None: this node only "
                                 "(or train.cluster.hosts)")
    hosts: list[HostConfig] = Field(default_factory=list, description="the nodes, written to <run_root>/train/hostfile "
                                    "(instead of train.cluster.hostfile)")
    launch: Literal["ssh", "per_node"] = Field("ssh", description="multi-node: ssh = DeepSpeed's launcher reaches every "
                                               "node over ssh/pdsh from this one; per_node = one `deepspeed --no_ssh "
                                               "--node_rank k` per node, started through train.cluster.node_command", json_schema_extra=NO_EFFECT)
    ssh_launcher: Literal["pdsh", "openmpi", "mvapich", "slurm", "mpich", "impi"] = Field(
        "pdsh", description="launch: ssh: how DeepSpeed's launcher reaches the nodes (its --launcher)", json_schema_extra=NO_EFFECT)
    node_command: list[str] = Field(default_factory=list, description="per_node: prefix that runs a command on node "
                                    "{host} (e.g. [ssh, '{host}'] or [srun, -N1, -w, '{host}']); empty: start it here", json_schema_extra=NO_EFFECT)
    node_command_shell: bool | None = Field(None, description="per_node: whether node_command hands the command to a "
                                            "remote shell as one line, so every argument is quoted (ssh, pdsh) or runs "
                                            "it as given (srun, kubectl exec); None: yes when it starts with ssh, "
                                            "autossh, rsh or pdsh", json_schema_extra=NO_EFFECT)
    master_addr: str | None = Field(None, description="rendezvous address; None: the first node's name", json_schema_extra=NO_EFFECT)
    master_port: int | None = Field(None, gt=1024, lt=65536, description="rendezvous port; None: a free port on the "
                                    "master host, chosen at the run's first launch and kept in <run_root>/train/master_port "
                                    "for every relaunch", json_schema_extra=NO_EFFECT)
    timeout_minutes: float = Field(30.0, gt=0, description="collective timeout of the process group", json_schema_extra=NO_EFFECT)
    zero_stage: Literal[0, 1, 2, 3, "auto"] = Field(1, description="ZeRO stage; auto: the fastest that fits, "
                                                   "predicted from preflight's measured bandwidth and step time "
                                                   "(tasks/train/comm_plan.py; `pretrain plan --cluster` prints it)")
    bucket_size: PositiveInt | Literal["auto"] = Field("auto", description="elements per gradient-reduce and "
                                                       "all-gather bucket; auto: the predicted best cut of the model "
                                                       "(DeepSpeed's own 5e8 holds all gradients of a 0.1-1B model, "
                                                       "so none is reduced during the backward pass)")
    overlap_comm: bool = Field(True, description="reduce gradient buckets during the backward pass (on GPUs "
                               "beside it; gloo runs collectives inline, so CPU ranks only show the schedule)")

    @field_validator("master_addr")
    @classmethod
    def _master_host(cls, name: str | None) -> str | None:
        return None if name is None else check_host(name, "train.cluster.master_addr")

    @model_validator(mode="after")
    def _one_host_list(self) -> "ClusterConfig":
        if self.hostfile and self.hosts:
            raise ValueError("set train.cluster.hostfile or train.cluster.hosts, not both")
        names = [h.name for h in self.hosts]
        if len(set(names)) != len(names):
            raise ValueError(f"train.cluster.hosts names a node twice: {names}")
        return self


class CheckpointConfig(Strict):
    """When checkpoints are written, which are kept, where they are mirrored, what the run resumes from."""
    save_every: int = Field(100, gt=0, description="checkpoint every N steps (and at the end)")
    save_final: bool = Field(True, description="save a checkpoint at the last step; off only for throughput "
                             "runs whose model is thrown away (a 500M checkpoint is about 7.6 GB)")
    stop_grace_s: float = Field(300.0, gt=0, description="on SIGTERM (a Prefect cancel), how long the ranks get to "
                                "save a checkpoint and stop before they are killed", json_schema_extra=NO_EFFECT)
    resume_tag: str | None = Field(None, description="resume from this checkpoint tag (e.g. step_00001000); None: the newest complete one")
    keep_last: int = Field(3, ge=1, description="complete checkpoints kept (the newest); older ones are deleted", json_schema_extra=NO_EFFECT)
    keep_every: int = Field(0, ge=0, description="also keep every checkpoint whose step is a multiple of this (0: none)", json_schema_extra=NO_EFFECT)
    export_hf: bool = Field(True, description="export the final checkpoint to the Hugging Face Llama format "
                            "(<run_root>/train/hf/<tag>) when training finishes")
    mirror_url: str | None = Field(None, description="copy every complete checkpoint here in the background "
                                   "(an fsspec URL: s3://bucket/run, file:///backup/run); None: no mirror", json_schema_extra=NO_EFFECT)

    @field_validator("mirror_url")
    @classmethod
    def _mirror_where_it_says(cls, url: str | None) -> str | None:
        return None if url is None else mirror_target(url)


class WatchConfig(Strict):
    """What the run logs and measures while it trains, and when a rank counts as hung or slow."""
    log_every: int = Field(1, gt=0, json_schema_extra=NO_EFFECT)
    comm_profile_every: int = Field(200, ge=0, description="profile one step in this many and log its measured "
                                    "communication time and share (comm_s, comm_share) next to the communication "
                                    "plan's prediction; 0: never", json_schema_extra=NO_EFFECT)
    hang_timeout_s: float | None = Field(None, gt=0, description="a rank that makes no progress for this long is "
                                         "hung: every rank writes its stacks to <train_dir>/hangs, the job ends and "
                                         "is relaunched from the newest checkpoint as a crash; None: max(60 s, 10 x "
                                         "the median step time)", json_schema_extra=NO_EFFECT)
    slow_phase_timeout_s: float = Field(1800.0, gt=0, description="the hang timeout while saving a checkpoint or "
                                        "running eval", json_schema_extra=NO_EFFECT)
    first_step_timeout_s: float = Field(1800.0, gt=0, description="the hang timeout from the process group's start "
                                        "to the end of the first step (loading data, building the model, resuming "
                                        "a checkpoint, compiling kernels)", json_schema_extra=NO_EFFECT)
    straggler_ratio: float = Field(1.5, gt=1, description="a rank whose own time per step (reading data, forward) "
                                   "is above this multiple of the median rank's ...", json_schema_extra=NO_EFFECT)
    straggler_reports: int = Field(20, ge=1, description="... for this many logged steps in a row is named in a "
                                   "straggler event and an MLflow tag", json_schema_extra=NO_EFFECT)
    eval_every: int = Field(0, ge=0, description="held-out perplexity per channel every N steps (0: off)")
    peak_tflops_per_gpu: float | None = Field(None, gt=0, description="for MFU; None: looked up from the GPU name", json_schema_extra=NO_EFFECT)


class TrainDataConfig(Strict):
    """Which samples the steps read, in what order and proportions, and from where."""
    eval_samples_per_channel: int = Field(200, ge=0, description="held-out samples per channel, taken from the end "
                                          "of each channel's data and never trained on (at most 10% of a channel); "
                                          "scored every eval_every steps and by the eval flow. 0: train on everything")
    mixture: MixtureConfig | None = Field(None, description="sampling weights per channel or source; None: natural proportions")
    stage_data_dir: str | None = Field(None, description="copy the token shards here on every node before training "
                                       "(a local disk or /dev/shm); None: read them where the tokenize stage wrote them", json_schema_extra=NO_EFFECT)
    order: Literal["feistel", "numpy_shuffle"] = Field(
        "feistel", description="position -> sample: a Feistel permutation per pool and epoch, computed per position "
        "(constant memory); numpy_shuffle only to finish a run whose checkpoints were written in that order "
        "(by earlier versions, whose checkpoints record no order)")


class TrainConfig(Strict):
    """The train section, nested as the training program's spec reads it; `changed(...)` edits fields by name."""
    steps: int = Field(gt=0, description="optimizer steps")
    seed: int = 1234
    anomaly: AnomalyConfig = AnomalyConfig()
    recovery: RecoveryConfig = RecoveryConfig()
    batch: BatchConfig
    optimizer: OptimizerConfig = OptimizerConfig()
    compute: ComputeConfig = ComputeConfig()
    cluster: ClusterConfig = ClusterConfig()
    checkpoint: CheckpointConfig = CheckpointConfig()
    watch: WatchConfig = WatchConfig()
    data: TrainDataConfig = TrainDataConfig()

    @model_validator(mode="after")
    def _decay_mix_needs_a_decay(self) -> "TrainConfig":
        mixture = self.data.mixture
        if mixture and mixture.decay_weights is not None and self.optimizer.schedule != "wsd":
            raise ValueError("train.data.mixture.decay_weights starts at the schedule's decay, which only "
                             "schedule: wsd has; set train.optimizer.schedule: wsd (and decay_frac) or drop "
                             "decay_weights")
        return self

    @model_validator(mode="after")
    def _warmup_ends(self) -> "TrainConfig":
        if self.optimizer.warmup_steps >= self.steps:
            raise ValueError(f"train.optimizer.warmup_steps={self.optimizer.warmup_steps} is not below "
                             f"train.steps={self.steps}: the learning rate would never leave its warm-up; lower "
                             f"train.optimizer.warmup_steps")
        return self

    def changed(self, **settings) -> "TrainConfig":
        """A copy with fields replaced by name, wherever they sit (every name is one field: `lr`, `hosts`, `steps`);
        like model_copy, it does not validate (settled plans set grad_accum beside global_batch_size)."""
        update = nested_train(settings)
        for section in SECTION_CLASSES.keys() & update.keys():
            update[section] = getattr(self, section).model_copy(update=update[section])
        return self.model_copy(update=update)

    def flat(self) -> dict:
        """Every setting by its own name, the sections opened (what the spec's flat dataclasses are picked from)."""
        out = {name: getattr(self, name) for name in TrainConfig.model_fields if name not in SECTION_CLASSES}
        for section in SECTION_CLASSES:
            value = getattr(self, section)
            out.update({name: getattr(value, name) for name in type(value).model_fields})
        return out


SECTION_CLASSES = {"batch": BatchConfig, "optimizer": OptimizerConfig, "compute": ComputeConfig,
                   "cluster": ClusterConfig, "checkpoint": CheckpointConfig, "watch": WatchConfig,
                   "data": TrainDataConfig}
SECTION_OF = {name: section for section, cls in SECTION_CLASSES.items() for name in cls.model_fields}


def nested_train(settings: dict) -> dict:
    """Train settings given by field name (`lr`, `hosts`, `steps`) in the train section's nested shape; a KeyError
    names a field the section does not have."""
    out: dict = {}
    for name, value in settings.items():
        section = SECTION_OF.get(name)
        if section is not None:
            out.setdefault(section, {})[name] = value
        elif name in TrainConfig.model_fields:
            out[name] = value
        else:
            raise KeyError(f"train has no field {name!r}")
    return out


def merged_train(train: dict, settings: dict) -> dict:
    """A train section (as YAML gives it) with settings given by field name written into their sections."""
    out = dict(train)
    for key, value in nested_train(settings).items():
        out[key] = {**out.get(key, {}), **value} if key in SECTION_CLASSES else value
    return out


# Where each key of the flat train section of versions before 2026-12-06 went (the README's changelog)
MOVED_KEYS = {**{name: f"{section}.{name}" for name, section in SECTION_OF.items()},
              "optimizer": "optimizer.implementation", "data_order": "data.order"}


def moved_key_hint(loc: tuple, value: object) -> str | None:
    """The fix for a key of the old flat train section, or None when the error is about something else."""
    if len(loc) != 2 or loc[0] != "train" or loc[1] not in MOVED_KEYS:
        return None
    if loc[1] in SECTION_CLASSES and isinstance(value, dict):
        return None  # a section given as one, with its own error
    return f"moved to train.{MOVED_KEYS[loc[1]]} (the train section is nested by topic: README, Changelog)"
