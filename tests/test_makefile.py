"""The Makefile's long Multi30k recipe: which `train` commands a run, new or resumed, gets, and
how it scores the result.

`make -n` prints the commands without running them, so each phase is checked in milliseconds
rather than hours.
"""

import shutil
import subprocess

import pytest

from repo_paths import REPO_ROOT

pytestmark = pytest.mark.skipif(shutil.which("make") is None, reason="needs GNU make")


def dry_run(runs):
    """The commands `make -n train-multi30k-long` would run, one a line."""
    shown = subprocess.run(
        ["make", "-n", "train-multi30k-long", "M30K_TARGETS=de", f"M30K_LONG_RUNS={runs}"],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return shown.replace("\\\n", " ").splitlines()


def training(commands):
    """The `train` commands among `commands`, flags split."""
    return [line.split() for line in commands if "keras_transformer train" in line]


def flag(command, name):
    return command[command.index(name) + 1]


def test_a_new_run_trains_both_phases_the_second_with_larger_updates(tmp_path):
    commands = dry_run(tmp_path)
    first, second = training(commands)
    assert flag(first, "--max-steps") == "8500" and flag(first, "--patience") == "10"
    assert "--set" not in first
    assert flag(second, "--max-steps") == "10660"
    assert flag(second, "--set") == "batch_tokens=8192" and "--allow-training-changes" in second
    # The measured run trained its second phase to the end, past its best validation loss.
    assert "--patience" not in second
    assert flag(first, "--output") == flag(second, "--output") == f"{tmp_path}/multi30k-ende"
    # make deletes an intermediate file once the target is made, unless told to keep it.
    assert not [line for line in commands if line.startswith("rm ")]


def test_a_rerun_resumes_the_phase_it_was_in(tmp_path):
    run = tmp_path / "multi30k-ende"
    run.mkdir()
    (run / "first-phase.done").touch()
    (second,) = training(dry_run(tmp_path))
    assert flag(second, "--set") == "batch_tokens=8192"
    # A second phase that finished leaves nothing to train: the first phase's batch size would
    # otherwise be refused as a change to the run, or recorded as one.
    (run / "learning_curve.png").touch()
    assert training(dry_run(tmp_path)) == []


def test_the_length_penalty_is_chosen_on_validation_and_test_is_scored_at_it_and_at_0_6(tmp_path):
    (evaluation,) = [line for line in dry_run(tmp_path) if "keras_transformer evaluate" in line]
    # One loop: test_2016_flickr after tuning α on validation, then at the default α (0.6).
    assert 'for tuning in "--tune-alpha 0.6 1.0 1.3 1.6 2.0" ""' in evaluation
    assert "--split test_2016_flickr $tuning" in evaluation and "--alpha" not in evaluation
