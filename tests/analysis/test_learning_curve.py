"""Learning curves: resumed segments laid end to end, retrained steps dropped, a PNG drawn, bad
records named."""

import json
from types import SimpleNamespace

import pytest
import tensorflow as tf

from keras_transformer.cli import main
from keras_transformer.run_directory import read_metrics
from keras_transformer.training.callbacks import MetricsJsonl


def write_records(path, records):
    path.write_text("".join(json.dumps(r) + "\n" for r in records))


SEGMENTS = [
    {"kind": "start", "step": 0, "time": 0.5},
    {"kind": "train", "step": 50, "time": 60.0, "loss": 6.0},
    {"kind": "epoch", "step": 100, "time": 120.0, "loss": 5.0, "val_loss": 4.5},
    {"kind": "bleu", "step": 100, "time": 130.0, "val_bleu": 3.0},
    # The run was killed and resumed: the new process counts from zero again.
    {"kind": "start", "step": 100, "time": 0.4},
    {"kind": "train", "step": 150, "time": 30.0, "loss": 4.0},
    {"kind": "bleu", "step": 200, "time": 90.0, "val_bleu": 9.0},
]


def test_resumed_segments_are_laid_end_to_end(tmp_path):
    path = tmp_path / "metrics.jsonl"
    write_records(path, SEGMENTS)
    minutes = [r["minutes"] for r in read_metrics(path)]
    assert minutes == pytest.approx([1.0, 2.0, 130 / 60, (130 + 30) / 60, (130 + 90) / 60])


def test_steps_a_resume_trained_again_are_dropped(tmp_path):
    """Killed at step 180 with its backup at step 100: steps 101-180 were trained twice, and
    only the second time counts, at the minutes it happened."""
    path = tmp_path / "metrics.jsonl"
    killed = [
        {"kind": "train", "step": 150, "time": 190.0, "loss": 4.4},
        {"kind": "bleu", "step": 180, "time": 240.0, "val_bleu": 7.0},
    ]
    write_records(path, SEGMENTS[:4] + killed + SEGMENTS[4:])
    records = read_metrics(path)
    assert [(r["kind"], r["step"]) for r in records] == [
        ("train", 50),
        ("epoch", 100),
        ("bleu", 100),
        ("train", 150),
        ("bleu", 200),
    ]
    assert records[3]["loss"] == 4.0
    assert records[3]["minutes"] == pytest.approx((240 + 30) / 60)


PARSING = [
    {"kind": "epoch", "step": 66, "time": 300.0, "loss": 5.2, "val_loss": 3.4},
    {"kind": "parsing", "step": 500, "time": 1200.0, "val_f1": 11.2},
]


@pytest.mark.parametrize("records", [SEGMENTS, PARSING], ids=["translation", "parsing"])
def test_curve_command_writes_a_png(tmp_path, records):
    write_records(tmp_path / "metrics.jsonl", records)
    assert main(["curve", str(tmp_path)]) in (0, None)
    assert (tmp_path / "learning_curve.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_a_broken_record_names_file_and_line(tmp_path):
    path = tmp_path / "metrics.jsonl"
    path.write_text(json.dumps(SEGMENTS[0]) + "\n{not json\n")
    with pytest.raises(ValueError, match=r"metrics.jsonl, line 2"):
        read_metrics(path)


def test_a_record_a_killed_process_left_unfinished_is_dropped(tmp_path):
    path = tmp_path / "metrics.jsonl"
    write_records(path, SEGMENTS[:3])
    with path.open("a") as file:
        file.write('{"kind": "train", "step": 1')  # killed mid-write
    assert [r["step"] for r in read_metrics(path)] == [50, 100]

    resumed = MetricsJsonl(path)  # the next process cuts it before its first record
    resumed.set_model(SimpleNamespace(optimizer=SimpleNamespace(iterations=tf.Variable(100))))
    resumed.on_train_begin()
    assert [(r["kind"], r["step"]) for r in read_metrics(path)] == [("train", 50), ("epoch", 100)]
    assert path.read_text().splitlines()[-1].startswith('{"kind": "start", "step": 100')
