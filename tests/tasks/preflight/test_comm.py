"""The communication-share profile: a few real training steps on 2 CPU ranks (gloo) under torch's profiler."""
import json

import pytest

from model.comm_profile import PROFILE_FILE
from tasks.preflight.checks import NOT_AVAILABLE
from tasks.preflight.comm import check_comm_share

pytestmark = pytest.mark.slow


def test_comm_share_of_two_cpu_ranks(prepared_run):
    cfg, root = prepared_run
    check = check_comm_share(cfg, root)
    result = json.loads((root / "preflight" / "profile" / PROFILE_FILE).read_text())
    assert result["world_size"] == 2 and result["backend"] == "gloo" and result["steps"] == 3
    assert 0 < result["comm_share"] < 1 and len(result["per_rank_share"]) == 2
    assert check.measured == f"{round(result['comm_share'], 3):g} of step time" and check.expected.startswith("<=")
    assert not (root / "preflight" / "profile" / "checkpoints").exists()  # measured, nothing saved


def test_comm_share_waits_for_tokens(tiny_cfg, tmp_path):
    assert check_comm_share(tiny_cfg, tmp_path).status == NOT_AVAILABLE
