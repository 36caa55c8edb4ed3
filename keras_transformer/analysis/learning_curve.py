"""Learning curves of a run: loss and validation BLEU (or parsing F1) against wall-clock minutes.

Reads the run's `metrics.jsonl` with `run_directory.read_metrics`: the resumed processes laid end to
end, so that the x axis is the run's total training time, and each step once, as the weights
last saw it.
"""

from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only: no display is needed or assumed

import matplotlib.pyplot as plt  # noqa: E402

from keras_transformer.run_directory import read_metrics  # noqa: E402


def plot_learning_curve(metrics_path, output_path, title=None) -> Path:
    """Draws training/validation loss and greedy validation BLEU (a parsing run's: F1) against
    minutes into a PNG."""
    records = read_metrics(metrics_path)

    def series(kinds, key):
        return metric_series(records, kinds, key)

    figure, (loss_axis, score_axis) = plt.subplots(1, 2, figsize=(11, 4))
    loss_axis.plot(*series(("train",), "loss"), label="training loss (running mean of the epoch)")
    loss_axis.plot(*series(("epoch", "partial_epoch"), "val_loss"), "o-", label="validation loss")
    loss_axis.set(xlabel="training minutes", ylabel="label-smoothed cross entropy")
    loss_axis.legend()
    if any(r["kind"] == "parsing" for r in records):
        score_axis.plot(*series(("parsing",), "val_f1"), "o-", color="tab:green")
        score_axis.set(xlabel="training minutes", ylabel="greedy validation F1 (EVALB)")
    else:
        score_axis.plot(*series(("bleu",), "val_bleu"), "o-", color="tab:green")
        score_axis.set(xlabel="training minutes", ylabel="greedy validation sacreBLEU")
    for axis in (loss_axis, score_axis):
        axis.grid(alpha=0.3)
    return save_figure(figure, output_path, title)


def metric_series(records, kinds, key, x="minutes") -> tuple[tuple, tuple]:
    """`(xs, ys)` of `key` against `x` in the metrics records of the given kinds, to plot."""
    points = [(r[x], r[key]) for r in records if r["kind"] in kinds and key in r]
    return tuple(zip(*points, strict=True)) if points else ((), ())


def save_figure(figure, output_path, title=None) -> Path:
    """Writes `figure` as a PNG, creating its folder, and closes it; returns the path."""
    if title:
        figure.suptitle(title)
    figure.tight_layout()
    output_path = Path(output_path)
    output_path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(output_path, dpi=120)
    plt.close(figure)
    return output_path
