"""Learning curves of a run: loss and validation BLEU (or parsing F1) against wall-clock minutes.

Reads the run's `metrics.jsonl` (written by `callbacks.MetricsJsonl`). Each training process
counts its time from its own start, so a resumed run restarts the clock; the segments are laid
end to end, which makes the x axis the run's total training time. A resumed process restarts
from the last backup, so the steps an earlier process logged past it were trained again: its
`start` record drops them, and the curve shows each step once, as the weights last saw it.
"""

import json
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only: no display is needed or assumed

import matplotlib.pyplot as plt  # noqa: E402


def read_metrics(path) -> list[dict]:
    """The records of a `metrics.jsonl`, each with `minutes` of training time since the start,
    without the steps that a later process, resumed from an earlier backup, trained again.

    Errors name the file and line of a record that is not JSON.
    """
    records, offset, previous = [], 0.0, 0.0
    with Path(path).open(encoding="utf-8") as file:
        for number, line in enumerate(file, start=1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as error:
                raise ValueError(f"{path}, line {number}: not a JSON record ({error})") from error
            if record["time"] < previous:  # a new process: resumed from its backup
                offset += previous
            previous = record["time"]
            if record["kind"] == "start":
                records = [r for r in records if r["step"] <= record["step"]]
            else:
                records.append({**record, "minutes": (offset + record["time"]) / 60.0})
    return records


def plot_learning_curve(metrics_path, output_path, title=None) -> Path:
    """Draws training/validation loss and greedy validation BLEU (a parsing run's: F1) against
    minutes into a PNG."""
    records = read_metrics(metrics_path)

    def series(kind, key):
        points = [(r["minutes"], r[key]) for r in records if r["kind"] == kind and key in r]
        return tuple(zip(*points, strict=True)) if points else ((), ())

    figure, (loss_axis, score_axis) = plt.subplots(1, 2, figsize=(11, 4))
    loss_axis.plot(*series("train", "loss"), label="training loss (running mean of the epoch)")
    loss_axis.plot(*series("epoch", "val_loss"), "o-", label="validation loss")
    loss_axis.set(xlabel="training minutes", ylabel="label-smoothed cross entropy")
    loss_axis.legend()
    if any(r["kind"] == "parsing" for r in records):
        score_axis.plot(*series("parsing", "val_f1"), "o-", color="tab:green")
        score_axis.set(xlabel="training minutes", ylabel="greedy validation F1 (EVALB)")
    else:
        score_axis.plot(*series("bleu", "val_bleu"), "o-", color="tab:green")
        score_axis.set(xlabel="training minutes", ylabel="greedy validation sacreBLEU")
    for axis in (loss_axis, score_axis):
        axis.grid(alpha=0.3)
    if title:
        figure.suptitle(title)
    figure.tight_layout()
    output_path = Path(output_path)
    output_path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(output_path, dpi=120)
    plt.close(figure)
    return output_path
