"""Average complete checkpoints (of one run, or of decay branches from it) into one Hugging Face model."""
from __future__ import annotations

import json
from pathlib import Path

from model import checkpoint as ckpt
from model.average import mean_state
from model.checkpoint_eval import held_out_scores
from model.export_hf import export, load_checkpoint_state
from model.llama import ModelArgs, Transformer
from model.protocol import SPEC_FILE
from model.spec import Spec
from tasks.train.export import DTYPES

AVERAGE_FILE = "average.json"


def checkpoint_meta(path: Path) -> dict:
    """A checkpoint folder's metadata; FileNotFoundError naming the folder when it is not a complete checkpoint."""
    path = Path(path)
    if not ckpt.is_complete(path.parent, path.name):
        raise FileNotFoundError(f"{path} is not a complete checkpoint (no COMPLETE file); pass "
                                f"<run_root>/train/checkpoints/<tag> folders that finished saving")
    return ckpt.read_meta(path.parent, path.name)


def same_model_and_data(metas: list[dict], paths: list[Path]) -> None:
    """Averaging needs one architecture and one tokenizer (the token dataset's version implies it)."""
    for key, what in (("model", "model architecture"), ("manifest_version", "token dataset (and tokenizer)")):
        for path, meta in zip(paths[1:], metas[1:]):
            if meta.get(key) != metas[0].get(key):
                raise ValueError(f"{path} has another {what} than {paths[0]} ({key}: {meta.get(key)} vs "
                                 f"{metas[0].get(key)}); average checkpoints of one run or its branches")


def held_out(state: dict, args: ModelArgs, train_dir: Path, device: str) -> dict | None:
    """The averaged weights' perplexity per channel on the run's held-out samples, as the eval flow scores a
    checkpoint; None when the run held none out."""
    spec = Spec.load(train_dir / SPEC_FILE)
    if not spec.data.eval_samples_per_channel:
        return None
    model = Transformer(args)
    model.load_state_dict(state)
    return held_out_scores(model.to(device).eval(), spec, device)


def average_checkpoints(paths: list[Path], tokenizer_dir: Path, out_dir: Path, dtype: str = "bf16",
                        device: str = "cpu") -> dict:
    """The mean of the checkpoints' fp32 weights, exported to out_dir with average.json naming its inputs, and
    scored on the held-out samples of the first input's run (when it held some out)."""
    paths = [Path(p) for p in paths]
    if len(paths) < 2:
        raise ValueError(f"averaging needs at least two checkpoints, got {len(paths)}")
    metas = [checkpoint_meta(p) for p in paths]
    same_model_and_data(metas, paths)
    state = mean_state(load_checkpoint_state(p.parent, p.name) for p in paths)
    args = ModelArgs(**metas[0]["model"])
    out = export(state, args, Path(tokenizer_dir), Path(out_dir), DTYPES[dtype],
                 source="average of " + ", ".join(str(p) for p in paths))
    record = {"inputs": [{"checkpoint": str(p), "step": m.get("step")} for p, m in zip(paths, metas)],
              "manifest_version": metas[0].get("manifest_version"), "dtype": dtype, "export_dir": str(out),
              "eval": held_out(state, args, paths[0].parent.parent, device)}
    (out / AVERAGE_FILE).write_text(json.dumps(record, indent=2))
    return record
