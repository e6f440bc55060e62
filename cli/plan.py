"""`pretrain plan`: the compute-optimal model size and token count for a budget, under your fit or Chinchilla's;
with --cluster, the communication plan of a config on its ranks."""
from __future__ import annotations

import json
import statistics
from pathlib import Path

DEFAULT_MFU = 0.4


def add_parser(sub) -> None:
    p = sub.add_parser("plan", help="compute-optimal model size and tokens for a FLOP budget or a cluster and days")
    budget = p.add_mutually_exclusive_group(required=True)
    budget.add_argument("--flops", type=float, help="training FLOPs (6 N D)")
    budget.add_argument("--days", type=float, help="wall-clock days on --gpus GPUs (needs --gpus)")
    budget.add_argument("--cluster", metavar="CONFIG", help="the communication plan of a pipeline config on its ranks: "
                        "ZeRO stage, accumulation and buckets predicted from its preflight's measurements")
    p.add_argument("--busbw-gbps", type=float, default=None, help="--cluster: bus bandwidth to plan with instead of "
                   "preflight's (nccl-tests all_reduce across the nodes)")
    p.add_argument("--sample-ms", type=float, default=None, help="--cluster: compute ms of one sample's forward and "
                   "backward on one rank, instead of preflight's profiled steps")
    p.add_argument("--memory-gb", type=float, default=None, help="--cluster: memory per rank; layouts above it are "
                   "not chosen")
    p.add_argument("--gpus", type=int, help="GPUs on the cluster (for --days, and for the wall time of --flops)")
    p.add_argument("--gpu", default=None, help="GPU model for its peak bf16 TFLOP/s, e.g. H100, A800, 4090")
    p.add_argument("--peak-tflops", type=float, default=None, help="peak TFLOP/s per GPU (overrides --gpu)")
    p.add_argument("--mfu", type=float, default=None, help="model FLOPs utilisation; default: the median measured "
                   "in the config's training run, else 0.4")
    p.add_argument("--tokens", type=float, default=None, help="unique training tokens available (data-limited plan)")
    p.add_argument("--epochs", type=float, default=1.0, help="passes over --tokens allowed (default 1)")
    p.add_argument("--config", default=None, help="a pipeline config: its scaling fit, measured MFU and GPU")
    p.add_argument("--fit", default=None, help="a fit.json from the scaling flow (default: <run_root>/scaling/fit.json)")
    p.add_argument("--law", default="chinchilla-refit", help="law without a fit: chinchilla-refit (default) or chinchilla")
    p.add_argument("--json", action="store_true", help="print the plan as JSON")


def measured_mfu(train_dir: Path) -> float | None:
    from model.protocol import read_jsonl

    values = [m["mfu"] for m in read_jsonl(train_dir / "metrics.jsonl") if m.get("mfu")]
    return statistics.median(values[len(values) // 5:]) if values else None  # past the warm-up steps


def resolve_inputs(args) -> dict:
    """Where the law, the peak and the MFU come from, each with a note saying so."""
    from model.perf import peak_tflops
    from pretrain.config import load_config

    cfg = load_config(args.config) if args.config else None
    root = cfg.run_root_path() if cfg else None
    from tasks.scaling.report import FIT_FILE

    fit = Path(args.fit) if args.fit else (root / "scaling" / FIT_FILE if root else None)
    peak, peak_note = args.peak_tflops, "--peak-tflops"
    if peak is None and args.gpu:
        peak, peak_note = peak_tflops(args.gpu), f"{args.gpu} (bf16 dense)"
        if peak is None:
            raise ValueError(f"no peak TFLOP/s known for GPU {args.gpu!r}; pass --peak-tflops")
    if peak is None and cfg and cfg.train and cfg.train.watch.peak_tflops_per_gpu:
        peak, peak_note = cfg.train.watch.peak_tflops_per_gpu, "train.watch.peak_tflops_per_gpu"
    if peak is None:
        peak, peak_note = peak_tflops("H100"), "H100 assumed (pass --gpu)"
    mfu, mfu_note = args.mfu, "--mfu"
    if mfu is None and root:
        mfu = measured_mfu(root / "train")
        mfu_note = f"measured in {root / 'train' / 'metrics.jsonl'}"
    if mfu is None:
        mfu, mfu_note = DEFAULT_MFU, "assumed (pass --mfu, or --config of a run that trained on GPUs)"
    return {"fit": fit, "peak": peak, "peak_note": peak_note, "mfu": mfu, "mfu_note": mfu_note}


def cluster_plan(config_path: str, busbw_gbps: float | None = None, sample_ms: float | None = None,
                 memory_gb: float | None = None):
    """The plan of a pipeline config on its ranks (after the nodes its preflight dropped), from its preflight's
    measurements, each replaceable by a figure of the user's. The vocabulary: the trained tokenizer's, else the
    config's vocab_size + reserved_tokens, padded as the tokenizer stage pads it."""
    from pretrain.config import embedding_rows, load_config
    from tasks.preflight.suite import without_dropped_nodes
    from tasks.train.comm_plan import Measured, make_plan, measured, ranks_of

    cfg = without_dropped_nodes(load_config(config_path))
    root = cfg.run_root_path()
    report = root / "tokenizer" / "report.json"
    tok = cfg.tokenizer
    rows = json.loads(report.read_text())["embedding_rows"] if report.is_file() else \
        embedding_rows(tok.vocab_size + tok.reserved_tokens, tok.pad_to_multiple)
    found = measured(root / "preflight")
    if busbw_gbps or sample_ms:
        if found is None and not (busbw_gbps and sample_ms):
            raise ValueError(f"{root / 'preflight'} holds no measurement to complete yours: pass both "
                             f"--busbw-gbps and --sample-ms, or run preflight first")
        found = Measured(busbw_gbps or found.busbw_gbps, "--busbw-gbps" if busbw_gbps else found.busbw_source,
                         sample_ms / 1e3 if sample_ms else found.compute_s_per_sample,
                         "--sample-ms" if sample_ms else found.compute_source,
                         found.profile_comm_share if found else None)
    return make_plan(cfg.model, cfg.train, rows, ranks_of(cfg.train), found, memory_gb)


def run_comm_plan(args) -> int:
    """`pretrain plan --cluster CONFIG`: every candidate layout predicted, and the choice the train stage makes."""
    from tasks.train.comm_plan import render

    try:
        plan = cluster_plan(args.cluster, args.busbw_gbps, args.sample_ms, args.memory_gb)
    except (ValueError, FileNotFoundError) as err:
        print(f"error: {err}")
        return 2
    print(plan.to_json() if args.json else render(plan))
    return 0


def run_plan(args) -> int:
    from tasks.scaling.plan import budget_from_cluster, human, load_law, plan, wall_days

    if args.cluster:
        return run_comm_plan(args)
    try:
        inputs = resolve_inputs(args)
        law = load_law(inputs["fit"], args.law)
        if args.days is not None and not args.gpus:
            raise ValueError("--days needs --gpus")
    except (ValueError, FileNotFoundError) as err:
        print(f"error: {err}")
        return 2
    flops = args.flops or budget_from_cluster(args.gpus, args.days, inputs["peak"], inputs["mfu"])
    p = plan(law, flops, args.tokens, args.epochs)
    if args.gpus:
        p["wall_days"] = wall_days(flops, args.gpus, inputs["peak"], inputs["mfu"])
    p.update(mfu=inputs["mfu"], mfu_source=inputs["mfu_note"], peak_tflops=inputs["peak"], peak_source=inputs["peak_note"])
    if args.json:
        print(json.dumps(p, indent=2))
        return 0
    lines = [f"law            {law.name}: {law.source}" + (f" ({inputs['fit']})" if law.name == "fitted" else ""),
             f"budget         {flops:.3g} FLOPs" + (f" = {args.gpus} GPUs x {args.days} days x {inputs['peak']:g} TFLOP/s"
                                                   f" x MFU {inputs['mfu']:.2f}" if args.days else ""),
             f"model          {human(p['params'])} non-embedding parameters",
             f"tokens         {human(p['tokens'])} ({p['tokens_per_param']:.1f} per parameter)"
             + (f"; data-limited: {args.epochs:g} epoch(s) of {human(args.tokens)}" if p["data_limited"] else ""),
             f"loss           {p['loss']:.3f} predicted",
             f"closest preset {p['closest_preset']} ({human(p['preset_params'])} non-embedding)"
             + ("; the plan is far from every preset: set model dims yourself" if not 0.5 <= p["params"] / p["preset_params"] <= 2
                else ""),
             f"llama 3 rule   {human(p['llama3_tokens'])} tokens, {human(p['llama3_params'])} parameters (reference)"]
    if "wall_days" in p:
        wall = f"{p['wall_days']:.2f} days" if p["wall_days"] >= 1 else f"{p['wall_days'] * 24:.2f} hours"
        lines.append(f"wall time      {wall} on {args.gpus} GPUs at {inputs['peak']:g} TFLOP/s "
                     f"({inputs['peak_note']}), MFU {inputs['mfu']:.2f} ({inputs['mfu_note']})")
    print("\n".join(lines))
    return 0
