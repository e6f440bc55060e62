"""`pretrain`: run one stage, or the whole pipeline, from the command line without deployments.

    pretrain clean --config configs/tiny.yaml
    pretrain run   --config configs/tiny.yaml
    pretrain eval  --config configs/tiny.yaml [--checkpoint step_00000200]
    pretrain scaling --config configs/tiny.yaml
    pretrain plan --gpus 64 --days 14 --gpu H100 [--config X | --fit fit.json] [--tokens 2e11]
    pretrain plan --cluster configs/500m.yaml [--busbw-gbps 12 --sample-ms 80]

Each subcommand runs the same Prefect flow that the deployments run; without a
Prefect server configured (PREFECT_API_URL), the CLI starts one temporary server
for the run and all its processes (cli/local_server.py).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from model.redact import redact
from pretrain.config import ConfigError, load_config
from pretrain.stages import STAGE_NAMES, STAGES
from cli.local_server import ServerFailed, prefect_api



def _flow_for(command: str):
    from flows.anneal import anneal_flow
    from flows.average import average_flow
    from flows.clean import clean_flow
    from flows.evaluation import eval_flow
    from flows.full import pretrain
    from flows.preflight import preflight_flow
    from flows.scaling import scaling_flow
    from flows.tokenizer import tokenizer_flow
    from flows.tokens import tokenize_flow
    from flows.train import train_flow

    return {"clean": clean_flow, "tokenizer": tokenizer_flow, "tokenize": tokenize_flow, "preflight": preflight_flow,
            "train": train_flow, "run": pretrain, "eval": eval_flow, "scaling": scaling_flow, "anneal": anneal_flow,
            "average": average_flow}[command]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="pretrain", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    for name in STAGE_NAMES + ("run",):
        p = sub.add_parser(name, help="the whole pipeline" if name == "run" else f"the {name} stage alone")
        p.add_argument("--config", required=True, help="pipeline YAML, e.g. configs/tiny.yaml")
        if name == "run" or STAGES[name].versioned:  # preflight runs every time
            p.add_argument("--force", action="append", default=[], metavar="STAGE",
                           choices=[s for s in STAGE_NAMES if STAGES[s].versioned] if name == "run" else [name],
                           help="run this stage even when its output is up to date (repeatable)")
    st = sub.add_parser("status", help="per stage: up to date, would rerun (and why) or missing; runs nothing")
    st.add_argument("--config", required=True)
    st.add_argument("--json", action="store_true", help="print the rows as JSON")
    sync = sub.add_parser("mlflow-sync", help="send the MLflow writes kept while the tracking server was down "
                          "(each stage sends them when it starts, too)")
    sync.add_argument("--config", required=True)
    lin = sub.add_parser("lineage", help="from the registered model (alias newest) back to its training run, the "
                         "stage runs at the versions it was trained on, and the clean manifest")
    lin.add_argument("--config", required=True)
    lin.add_argument("--alias", default="newest")
    ev = sub.add_parser("eval", help="score a saved checkpoint on held-out data (and lm-eval tasks), log it to MLflow")
    ev.add_argument("--config", required=True)
    ev.add_argument("--checkpoint", default=None, help="checkpoint tag; default: the newest complete one")
    from cli.plan import add_parser as add_plan

    add_plan(sub)
    sc = sub.add_parser("scaling", help="train the scaling grid (scaling.budgets x scaling.dims) and fit the law")
    sc.add_argument("--config", required=True)
    check = sub.add_parser("check-config", help="validate a config file and print it")
    check.add_argument("--config", required=True)
    extend = sub.add_parser("extend-tokenizer", help="add domain terms to a trained tokenizer as added tokens")
    extend.add_argument("--tokenizer", required=True, help="directory holding tokenizer.json")
    extend.add_argument("--terms", required=True, help="file with one term per line")
    extend.add_argument("--out", required=True, help="directory for the extended tokenizer")
    hf = sub.add_parser("export-hf", help="export a training checkpoint to the Hugging Face Llama format")
    hf.add_argument("--config", required=True)
    hf.add_argument("--tag", default=None, help="checkpoint tag, e.g. step_00001000; default: the newest complete one")
    hf.add_argument("--out", default=None, help="output directory; default: <run_root>/train/hf/<tag>")
    hf.add_argument("--dtype", choices=["bf16", "fp16", "fp32"], default="bf16")
    an = sub.add_parser("anneal", help="branch a decay from a stable-phase checkpoint of the run: train it in "
                        "<run_root>/anneal/<name>, export, score and register it (the run's files untouched)")
    an.add_argument("--config", required=True)
    an.add_argument("--from", dest="from_checkpoint", default=None, metavar="TAG",
                    help="the checkpoint to branch from, e.g. step_00001000; default: the newest complete one")
    an.add_argument("--tokens", type=int, required=True, help="tokens to train in the decay")
    an.add_argument("--mix", default=None, help="the decay's shares per pool of the run's mixture, e.g. "
                    "zh=0.3,en=0.5,code=0.2; default: the run's own mix")
    an.add_argument("--name", default=None, help="the branch's folder and alias; default: <from>-<tokens>")
    an.add_argument("--min-lr", type=float, default=0.0, help="where the learning rate decays to (default 0)")
    avg = sub.add_parser("average", help="average the weights of complete checkpoints (of a run or its decay "
                         "branches) into one Hugging Face model, scored and registered (alias average-<name>)")
    avg.add_argument("--config", required=True, help="the run's config (its tokenizer is the export's)")
    avg.add_argument("--checkpoint", action="append", required=True, metavar="DIR",
                     help="a checkpoint folder, <run_root>/train/checkpoints/<tag> (repeat, at least twice)")
    avg.add_argument("--name", default=None, help="the average's name (its folder <run_root>/train/hf/average-<name> "
                     "and alias average-<name>); default: the tags joined")
    avg.add_argument("--dtype", choices=["bf16", "fp16", "fp32"], default="bf16")
    return parser


def export_command(cfg, args) -> int:
    from tasks.train.export import export_run_checkpoint

    root = cfg.run_root_path()
    try:
        result = export_run_checkpoint(root / "train", root / "tokenizer", args.out, args.tag, args.dtype)
    except (OSError, ValueError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    print(json.dumps(result, indent=2))
    return 0


def extend_command(args) -> int:
    from tasks.tokenizer.extend import run_extend

    try:
        summary = run_extend(args.tokenizer, args.terms, args.out)
    except (OSError, ValueError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    print(json.dumps(summary, indent=2, ensure_ascii=False))
    return 0


def path_checks(cfg) -> tuple[list[str], list[str]]:
    """(problems, notes) about what the config points at: its sources and its run root."""
    import fsspec

    from tasks.clean.readers import SourceError, expand_source

    problems, notes = [], []
    for source in cfg.clean.sources if cfg.clean else ():
        protocol = fsspec.utils.get_protocol(source.resolved_path())
        if protocol not in ("file", "local"):
            notes.append(f"not checked: source '{source.source_name}' is remote ({protocol}://); the clean stage "
                         f"will read it")
            continue
        try:
            _, files = expand_source(source)
            notes.append(f"checked: source '{source.source_name}': {len(files)} file(s)")
        except SourceError as err:
            problems.append(str(err))
    root = cfg.run_root_path()
    existing = next(p for p in (root, *root.parents) if p.exists())
    if existing == root and not root.is_dir():
        problems.append(f"run_root {root} exists and is not a directory; point run_root elsewhere")
    elif not os.access(existing, os.W_OK):
        problems.append(f"run_root {root}: {existing} is not writable; point run_root at a folder you can write")
    else:
        notes.append(f"checked: run_root {root} " + ("exists" if existing == root else "will be created"))
    from flows.tracking import tracking_uri, unreachable

    uri = tracking_uri(cfg)
    if problem := unreachable(uri):
        problems.append(problem)
    else:
        notes.append(f"checked: MLflow {redact(uri)}" + (" answers" if uri.startswith("http") else " (local store)"))
    return problems, notes


def check_config_command(cfg) -> int:
    print(json.dumps(redact(cfg.model_dump(mode="json")), indent=2))
    problems, notes = path_checks(cfg)
    for line in notes:
        print(line)
    for line in problems:
        print(f"error: {line}", file=sys.stderr)
    return 2 if problems else 0


def status_command(cfg, as_json: bool) -> int:
    from tasks.versions import status

    rows = status(cfg)
    if as_json:
        print(json.dumps(rows, indent=2))
        return 0
    for r in rows:
        print(f"{r['stage']:<10} {r['state']:<16} {r['expected'] or '':<17} {r['why']}")
    for r in rows:
        if r.get("warning"):
            print(r["warning"])
    if kept := mlflow_kept(cfg):
        print(kept)
    return 0


def mlflow_kept(cfg) -> str | None:
    """A line on the MLflow writes kept while the tracking server was down, None when there are none."""
    from flows.mlflow_journal import Journal
    from flows.tracking import tracking_uri

    journal = Journal(cfg.run_root_path(), tracking_uri(cfg))
    if not (count := journal.pending()):
        return None
    return (f"MLflow: {count} write(s) kept while the tracking server was down ({journal.path}); the runs they "
            f"end stay RUNNING until they are sent: by the next stage, or now with `pretrain mlflow-sync`")


def mlflow_sync_command(cfg) -> int:
    from flows.mlflow_journal import Journal
    from flows.tracking import tracking_uri, unreachable

    uri = tracking_uri(cfg)
    journal = Journal(cfg.run_root_path(), uri)
    if not journal.pending():
        print("MLflow: nothing kept, nothing to send")
        return 0
    if problem := unreachable(uri):
        print(f"error: {problem}; {journal.pending()} write(s) stay kept in {journal.path}", file=sys.stderr)
        return 1
    sent, left = journal.replay()
    print(f"MLflow: sent {sent} kept write(s)" + (f"; {left} still kept in {journal.path}" if left else ""))
    return 1 if left else 0


def lineage_command(cfg, alias: str) -> int:
    from flows import tracking
    from flows.versions import lineage

    try:
        found = lineage(tracking.tracking_uri(cfg), cfg.name, alias)
    except Exception as err:  # MlflowException (no such model or alias) or LookupError (a stage run is gone)
        print(f"error: no lineage for model {cfg.name!r} alias {alias!r}: {err}", file=sys.stderr)
        return 2
    found["clean_manifest"] = json.loads(Path(found.pop("clean_manifest")).read_text())
    print(json.dumps(found, indent=2, default=str))
    return 0


def main(argv: list[str] | None = None) -> int:
    # Prefect's telemetry heartbeat only fails on these offline machines
    os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
    args = build_parser().parse_args(argv)
    if args.command == "extend-tokenizer":
        return extend_command(args)
    if args.command == "plan":
        from cli.plan import run_plan

        return run_plan(args)
    try:
        cfg = load_config(args.config).require(args.command)
    except ConfigError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    if args.command == "check-config":
        return check_config_command(cfg)
    if args.command == "status":
        return status_command(cfg, args.json)
    if args.command == "lineage":
        return lineage_command(cfg, args.alias)
    if args.command == "mlflow-sync":
        return mlflow_sync_command(cfg)
    if args.command == "export-hf":
        return export_command(cfg, args)
    try:
        extra = {"checkpoint": args.checkpoint} if args.command == "eval" else {}
        if args.command == "average":
            extra = {"checkpoints": [str(Path(c).resolve()) for c in args.checkpoint], "name": args.name,
                     "dtype": args.dtype}
        if args.command == "anneal":
            extra = {"from_checkpoint": args.from_checkpoint, "tokens": args.tokens, "mix": args.mix,
                     "name": args.name, "min_lr": args.min_lr}
        if getattr(args, "force", None):
            extra = {"force": args.force} if args.command == "run" else {"force": True}
        with prefect_api():  # one server for the run and all its processes, before Prefect is imported
            # the flow gets the file's path, not its contents: Prefect keeps flow parameters, and a config can hold
            # a password in a URL (it loads the file itself, already validated above)
            result = _flow_for(args.command)(str(Path(args.config).resolve()), **extra)
    except ServerFailed as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    except Exception as err:  # the flow already logged the traceback
        print(f"error: {args.command} failed: {err}", file=sys.stderr)
        return 1
    print(json.dumps(result, indent=2, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
