"""The token ledger's table: the last logged step's tokens per phase and pool, with shares within each phase."""
from model.protocol import append_jsonl
from tasks.train.ledger import ledger_rows


def test_rows_come_from_the_last_step_that_logged_a_ledger(tmp_path):
    metrics = tmp_path / "metrics.jsonl"
    assert ledger_rows(metrics) == []  # no training yet
    append_jsonl(metrics, {"step": 1, "loss": 3.0, "tokens_per_s": 10.0, "tokens/stable/zh": 128, "tokens/stable/en": 0,
                           "tokens/decay/zh": 0, "tokens/decay/en": 0})
    append_jsonl(metrics, {"step": 2, "loss": 2.9, "tokens/stable/zh": 256, "tokens/stable/en": 256,
                           "tokens/decay/zh": 128, "tokens/decay/en": 384})
    append_jsonl(metrics, {"step": 2, "eval_ppl_zh": 40.0})  # an eval line carries no ledger
    rows = ledger_rows(metrics)
    assert rows == [{"step": 2, "phase": "stable", "pool": "zh", "tokens": 256, "share": 0.5},
                    {"step": 2, "phase": "stable", "pool": "en", "tokens": 256, "share": 0.5},
                    {"step": 2, "phase": "decay", "pool": "zh", "tokens": 128, "share": 0.25},
                    {"step": 2, "phase": "decay", "pool": "en", "tokens": 384, "share": 0.75}]
