"""The eval stage's bookkeeping: previous checkpoint, regression flag, one score per checkpoint."""
import pytest

from model.protocol import append_jsonl
from tasks.eval.evaluate import HISTORY, compare, eval_dir, evaluate, pick_checkpoint, previous_of


def test_regression_is_flagged_against_the_previous_older_checkpoint():
    records = [{"tag": "step_00000300", "step": 300, "ppl": {"en": 20.0, "zh": 30.0}},
               {"tag": "step_00000100", "step": 100, "ppl": {"en": 40.0, "zh": 50.0}}]
    current = {"tag": "step_00000400", "step": 400, "ppl": {"en": 20.3, "zh": 31.5, "code": 9.0}}
    rows = {r["channel"]: r for r in compare(previous_of(records, 400), current, regression_pct=2.0)}
    assert rows["en"]["previous_tag"] == "step_00000300" and rows["en"]["change_pct"] == 1.5 and not rows["en"]["regressed"]
    assert rows["zh"]["change_pct"] == 5.0 and rows["zh"]["regressed"]
    assert rows["code"]["previous_ppl"] is None and not rows["code"]["regressed"]  # a new channel: nothing to compare
    # an older checkpoint scored late is compared with the one before it, not with a newer one
    assert previous_of(records, 200)["tag"] == "step_00000100"
    assert previous_of(records, 100) is None


def test_a_checkpoint_is_scored_once_and_missing_ones_are_named(tiny_cfg):
    scored = {"tag": "step_00000003", "step": 3, "ppl": {"en": 12.0}, "loss": {}, "tokens": {}}
    eval_dir(tiny_cfg).mkdir(parents=True)
    append_jsonl(eval_dir(tiny_cfg) / HISTORY, scored)
    again = evaluate(tiny_cfg, "step_00000003")  # no checkpoint on disk: it would fail if it scored again
    assert again["reused"] and again["ppl"] == {"en": 12.0}
    assert pick_checkpoint(tiny_cfg, None) is None
    with pytest.raises(FileNotFoundError, match="step_00000009 is not a complete checkpoint"):
        pick_checkpoint(tiny_cfg, "step_00000009")


def test_task_figures_regress_only_beyond_their_noise():
    from tasks.eval.task_files import compare_tasks

    before = {"tasks": {"zh-cloze": {"bpb": 2.00, "bpb_se": 0.05, "acc": 0.40, "acc_se": 0.05, "acc_norm": 0.40,
                                     "acc_norm_se": 0.05}}}
    within = {"tasks": {"zh-cloze": {"bpb": 2.10, "bpb_se": 0.05, "acc": 0.30, "acc_se": 0.05, "acc_norm": 0.55,
                                     "acc_norm_se": 0.05}}}
    rows = {r["figure"]: r for r in compare_tasks(before, within, sigmas=2.0)}
    assert rows["bpb"]["noise"] == round(2 * (0.05 ** 2 * 2) ** 0.5, 4) == 0.1414
    assert not rows["bpb"]["regressed"] and not rows["acc"]["regressed"]  # 0.10 worse each: inside 0.14
    assert not rows["acc_norm"]["regressed"]  # better is never a regression
    beyond = {"tasks": {"zh-cloze": {**within["tasks"]["zh-cloze"], "bpb": 2.20, "acc": 0.20}}}
    rows = {r["figure"]: r for r in compare_tasks(before, beyond, sigmas=2.0)}
    assert rows["bpb"]["regressed"] and rows["acc"]["regressed"] and rows["acc"]["change"] == -0.2
    fresh = compare_tasks(None, beyond, sigmas=2.0)  # nothing before: nothing to call a regression
    assert fresh and not any(r["regressed"] for r in fresh) and all(r["previous"] is None for r in fresh)
