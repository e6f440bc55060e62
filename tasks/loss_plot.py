"""A PNG of the loss curve with every rollback marked: what happened to a run, at a glance in MLflow."""
from __future__ import annotations

from pathlib import Path

from model.protocol import read_jsonl


def attempts(metrics: list[dict]) -> list[list[dict]]:
    """Metrics split where the step goes back (a resume or rollback started a new attempt)."""
    out: list[list[dict]] = []
    for m in metrics:
        if not out or m["step"] <= out[-1][-1]["step"]:
            out.append([])
        out[-1].append(m)
    return out


def loss_plot(train_dir: Path, out: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")  # no display on a worker
    import matplotlib.pyplot as plt

    metrics = [m for m in read_jsonl(Path(train_dir) / "metrics.jsonl") if "loss" in m]
    fig, ax = plt.subplots(figsize=(9, 4))
    for n, attempt in enumerate(attempts(metrics)):  # a rolled-back attempt is drawn faded, the one after on top
        ax.plot([m["step"] for m in attempt], [m["loss"] for m in attempt], lw=0.8, color="tab:blue",
                alpha=1.0 if n == len(attempts(metrics)) - 1 else 0.35, label="train loss" if n == 0 else None)
    for d in read_jsonl(Path(train_dir) / "recovery.jsonl"):
        if d["action"] == "rollback":
            a = d["anomaly"]
            ax.axvline(a["step"], color="tab:red", lw=1)
            ax.annotate(f"{a['kind']} -> {d['checkpoint'] or 'start'}\nskip {d['skip'][0]}..{d['skip'][1]}",
                        (a["step"], ax.get_ylim()[1]), fontsize=7, color="tab:red", va="top", ha="right")
        elif d["action"] == "resume":
            ax.axvline(metrics[-1]["step"] if metrics else 0, color="tab:orange", lw=1, ls="--")
    ax.set_xlabel("step")
    ax.set_ylabel("loss")
    if metrics:
        ax.legend(loc="upper right")
    fig.tight_layout()
    fig.savefig(out, dpi=120)
    plt.close(fig)
    return Path(out)
