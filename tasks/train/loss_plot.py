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


def rollback_label(decision: dict) -> str:
    skip = decision.get("skip")
    return (f"{decision['anomaly']['kind']} -> {decision['checkpoint'] or 'start'}"
            + (f"\nskip {skip[0]}..{skip[1]}" if skip else ""))


def loss_figure(train_dir: Path):
    """The figure: each attempt's curve (rolled-back ones faded), a red line and label at every rollback."""
    import matplotlib

    matplotlib.use("Agg")  # no display on a worker
    import matplotlib.pyplot as plt

    metrics = [m for m in read_jsonl(Path(train_dir) / "metrics.jsonl") if "loss" in m]
    runs = attempts(metrics)
    fig, ax = plt.subplots(figsize=(9, 4))
    for n, attempt in enumerate(runs):
        ax.plot([m["step"] for m in attempt], [m["loss"] for m in attempt], lw=0.8, color="tab:blue",
                alpha=1.0 if n == len(runs) - 1 else 0.35, label="train loss" if n == 0 else None)
    for d in read_jsonl(Path(train_dir) / "recovery.jsonl"):
        if d["action"] == "rollback":
            ax.axvline(d["anomaly"]["step"], color="tab:red", lw=1)
            ax.annotate(rollback_label(d), (d["anomaly"]["step"], ax.get_ylim()[1]), fontsize=7, color="tab:red",
                        va="top", ha="right")
        elif d["action"] == "resume":
            ax.axvline(metrics[-1]["step"] if metrics else 0, color="tab:orange", lw=1, ls="--")
    ax.set_xlabel("step")
    ax.set_ylabel("loss")
    if metrics:
        ax.legend(loc="upper right")
    fig.tight_layout()
    return fig


def loss_plot(train_dir: Path, out: Path) -> Path:
    import matplotlib.pyplot as plt

    fig = loss_figure(train_dir)
    fig.savefig(out, dpi=120)
    plt.close(fig)
    return Path(out)
