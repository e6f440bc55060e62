"""Decay branches: what a branch takes from the run (step, learning rate, mix), and what it refuses. The branch's
training, export and registration run in tests/flows/test_anneal_flow.py."""
import json

import pytest

from pretrain.config import parse_config
from tasks.train.anneal import branch_settings, parse_mix, prepare_branch
from tests.conftest import tiny_dict


def run_with_checkpoint(tmp_path, step: int, **train):
    """A run root whose train/checkpoints holds one complete checkpoint's metadata (the settings are what is
    tested; no weights are read)."""
    cfg = parse_config(tiny_dict(tmp_path / "run", train={"steps": 100, **train}))
    tag = tmp_path / "run" / "train" / "checkpoints" / f"step_{step:08d}"
    tag.mkdir(parents=True)
    (tag / "weights.pt").write_bytes(b"weights")
    (tag / "COMPLETE").write_text(json.dumps({"step": step, "global_batch": 8}))
    return cfg, tag.name


def test_mix_is_pool_equals_share():
    assert parse_mix("zh=0.3, en=0.5,code=0.2") == {"zh": 0.3, "en": 0.5, "code": 0.2}
    assert parse_mix(None) is None
    for bad in ("zh:0.3", "zh=lots", "=0.5"):
        with pytest.raises(ValueError, match="is not pool=share"):
            parse_mix(bad)


def test_a_branch_starts_at_the_runs_rate_and_decays_over_its_tokens(tmp_path):
    cfg, tag = run_with_checkpoint(tmp_path, 40, schedule="cosine", lr=1e-3, min_lr=1e-4, warmup_steps=10,
                                   mixture={"by": "channel", "weights": {"zh": 1, "en": 1}})
    settings, source = branch_settings(cfg, tag, tokens=10 * 8 * 128 + 1, mix={"code": 1.0}, min_lr=0.0)
    assert (source["step"], source["steps"], settings.steps, settings.optimizer.decay_steps) == (40, 11, 51, 11)
    from model.schedule import cosine_lr
    opt = settings.optimizer
    assert opt.lr == pytest.approx(cosine_lr(40, lr=1e-3, min_lr=1e-4, warmup=10, total=100))
    assert opt.schedule == "wsd" and opt.warmup_steps == 0 and opt.min_lr == 0.0
    assert settings.data.mixture.weights == {"zh": 1, "en": 1} and settings.data.mixture.decay_weights == {"code": 1.0}


def test_a_branch_is_refused_inside_the_runs_decay_or_with_a_mix_of_no_pools(tmp_path):
    cfg, tag = run_with_checkpoint(tmp_path, 90, schedule="wsd", decay_frac=0.2)
    with pytest.raises(ValueError, match=r"inside the run's own decay; branch from a stable-phase checkpoint "
                                         r"\(step <= 80\)"):
        branch_settings(cfg, tag, 1000, None, 0.0)
    cfg, tag = run_with_checkpoint(tmp_path / "nomix", 50, schedule="wsd")
    with pytest.raises(ValueError, match="this run has none; set train.data.mixture"):
        branch_settings(cfg, tag, 1000, {"zh": 1.0}, 0.0)


def test_a_branch_links_the_checkpoint_and_a_name_is_not_reused_for_another_branch(tmp_path):
    cfg, tag = run_with_checkpoint(tmp_path, 40, schedule="wsd")
    _, out, source = prepare_branch(cfg, "b1", tag, 2048, None)
    linked = out / "checkpoints" / tag / "weights.pt"
    original = cfg.run_root_path() / "train" / "checkpoints" / tag / "weights.pt"
    assert linked.read_bytes() == b"weights" and linked.stat().st_ino == original.stat().st_ino  # a link, no copy
    assert prepare_branch(cfg, "b1", tag, 2048, None)[2] == source  # a retry: the same branch
    with pytest.raises(ValueError, match="branch 'b1' exists from .* with other settings"):
        prepare_branch(cfg, "b1", tag, 4096, None)
