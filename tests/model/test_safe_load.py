"""Checkpoint files are data: a tampered one on the shared run root runs no code, and real ones still load."""
import os
import subprocess
import sys
import textwrap

import pytest
import torch

from model.export_hf import load_checkpoint_state
from model.train_state import restore_rng, rng_state, set_rng_state
from tests.conftest import ROOT


class Payload:
    """Unpickling this runs a shell command: what a tampered checkpoint file can hold."""

    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return os.system, (f"touch {self.marker}",)


def tampered(path, marker) -> None:
    torch.save({"module": {"w": torch.zeros(1)}, "x": Payload(marker)}, path)


def test_the_tampered_file_would_run_its_code_under_a_plain_load(tmp_path):
    tampered(tmp_path / "f.pt", tmp_path / "ran")
    torch.load(tmp_path / "f.pt", weights_only=False)  # what the export and the RNG restore did before
    assert (tmp_path / "ran").exists()


def test_export_refuses_a_tampered_checkpoint_without_running_it(tmp_path):
    tag = tmp_path / "ckpt" / "step_1"
    tag.mkdir(parents=True)
    tampered(tag / "mp_rank_00_model_states.pt", tmp_path / "ran")
    with pytest.raises(Exception, match="Weights only load failed"):
        load_checkpoint_state(tmp_path / "ckpt", "step_1")
    tampered(tag / "bf16_zero_pp_rank_0_mp_rank_00_optim_states.pt", tmp_path / "ran")  # the ZeRO path: DeepSpeed's
    (tmp_path / "ckpt" / "latest").write_text("step_1")
    with pytest.raises(Exception, match="Weights only load failed"):
        load_checkpoint_state(tmp_path / "ckpt", "step_1")
    assert not (tmp_path / "ran").exists()
    assert os.environ.get("TORCH_FORCE_WEIGHTS_ONLY_LOAD") is None  # the process is left as it was


def test_rng_states_round_trip_through_the_weights_only_loader_and_a_tampered_one_is_skipped(tmp_path, capsys):
    import random

    import numpy as np

    torch.save(rng_state(), tmp_path / "rng.pt")
    expected = (torch.rand(3), np.random.rand(3), random.random())
    restore_rng(tmp_path / "rng.pt")
    again = (torch.rand(3), np.random.rand(3), random.random())
    assert torch.equal(expected[0], again[0]) and (expected[1] == again[1]).all() and expected[2] == again[2]
    set_rng_state(torch.load(tmp_path / "rng.pt", weights_only=True))
    tampered(tmp_path / "evil.pt", tmp_path / "ran")
    restore_rng(tmp_path / "evil.pt")
    assert not (tmp_path / "ran").exists()
    assert "RNG states in" in capsys.readouterr().err


SAVE_AND_LOAD = textwrap.dedent("""
    import os, sys, torch
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=sys.argv[2], RANK="0", WORLD_SIZE="1", LOCAL_RANK="0",
                      DS_ACCELERATOR="cpu")
    import deepspeed
    from model.export_hf import load_checkpoint_state
    from model.llama import ModelArgs, Transformer
    from model.optimizer import with_optimizer
    from model.safe_load import force_weights_only
    deepspeed.init_distributed(dist_backend="gloo")
    args = ModelArgs(dim=32, n_layers=1, n_heads=2, n_kv_heads=1, vocab_size=64, ffn_hidden=64, max_seq_len=16)
    out = sys.argv[1]
    for stage in (0, 1, 2, 3):
        for precision in ("fp32", "bf16"):
            cfg = {"train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": 1, "gradient_clipping": 1.0,
                   "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}}, "zero_optimization": {"stage": stage},
                   "bf16": {"enabled": precision == "bf16"}, "zero_allow_untested_optimizer": True}
            cfg, _ = with_optimizer(cfg, "auto", "cpu")
            model = Transformer(args)
            engine, *_ = deepspeed.initialize(model=model, model_parameters=model.parameters(), config=cfg)
            x = torch.randint(0, 64, (1, 9))
            engine.backward(torch.nn.functional.cross_entropy(engine(x[:, :-1]).flatten(0, 1).float(), x[:, 1:].flatten()))
            engine.step()
            where = f"{out}/{stage}-{precision}"
            engine.save_checkpoint(where, tag="t", client_state={"step": 1})
            os.environ["TORCH_FORCE_WEIGHTS_ONLY_LOAD"] = "1"
            force_weights_only()
            path, client = engine.load_checkpoint(where, tag="t")
            assert path is not None and client["step"] == 1, (stage, precision)
            assert set(load_checkpoint_state(where, "t")) == set(model.state_dict()) - {"rope_cos", "rope_sin"}
            os.environ.pop("TORCH_FORCE_WEIGHTS_ONLY_LOAD")
            print("loaded", stage, precision, flush=True)
""")


@pytest.mark.slow
def test_checkpoints_of_every_zero_stage_and_precision_load_weights_only(tmp_path):
    from tasks.common.ports import free_port

    proc = subprocess.run([sys.executable, "-c", SAVE_AND_LOAD, str(tmp_path), str(free_port())], cwd=ROOT,
                          capture_output=True, text=True, timeout=600, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    assert proc.stdout.count("loaded") == 8
