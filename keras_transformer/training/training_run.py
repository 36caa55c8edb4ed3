"""`TrainingRun`: the settings of one training run, apart from the model's hyperparameters.

A module of its own, free of any framework, so that the command line builds `train`'s flags
from its fields without loading Keras (whose backend it selects first).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from keras_transformer.config import ConfigError

PRECISIONS = ("float32", "mixed_float16", "mixed_bfloat16")
# "paper": Eq. 3 (§5.3) with the config's warmup_steps and learning_rate_scale; "constant": a
# constant rate after a short linear warmup, for fine-tuning a pretrained model
# (`objectives.schedule.ConstantSchedule`).
LEARNING_RATE_SCHEDULES = ("paper", "constant")
# The constant schedule's rate where none is given: the order of rate that pretrained
# Transformers are fine-tuned with (Hugging Face's `TrainingArguments` default), 14x below Eq. 3's
# peak for base.
FINE_TUNING_LEARNING_RATE = 5e-5


def _setting(default, help, **metadata):
    """A `TrainingRun` field: its default, and its `help` (and flag) for the command line."""
    return dataclasses.field(default=default, metadata={"help": help, **metadata})


@dataclasses.dataclass
class TrainingRun:
    """Where the data is, where the run goes, and how long and how it runs.

    Hyperparameters live in `TransformerConfig`; these are the settings of one run. Each field's
    `help` documents it; `keras-transformer train`'s flags are generated from them.
    """

    output: Path = dataclasses.field(metadata={"help": "run directory"})
    data_dir: Path | None = _setting(
        None,
        "the dataset's directory (default: ../shared/data/multi30k, or ptb_sample for ptb; "
        "wmt14 needs one)",
        alias={
            "flag": "--data",
            "metavar": "DIR",
            "help": "a corpus of any language pair that `keras-transformer prepare` wrote: its "
            "shards are streamed, its languages and vocabulary used",
            "implies": {"dataset": "prepared"},
        },
    )
    dataset: str = _setting(
        "multi30k",
        "multi30k, wmt14 (through TFDS into the data directory), ptb for parsing (§6.3), or "
        "prepared (a `prepare`d data directory)",
    )
    source_language: str | None = _setting(
        None, "source language (default: the dataset's: en; words for ptb)", flag="--src"
    )
    target_language: str | None = _setting(
        None, "target language (default: the dataset's: de; tree for ptb)", flag="--tgt"
    )
    lowercase: bool = _setting(
        False,
        "case-fold all text (in the vocabulary model); BLEU is then scored case-insensitively",
    )
    max_steps: int | None = _setting(None, "stop at this many updates")
    max_minutes: float | None = _setting(None, "wall-clock budget of this process")
    patience: int | None = _setting(
        None, "stop after this many epochs without a lower validation loss (resumes included)"
    )
    epochs: int = _setting(1000, "passes over the training data")
    checkpoint_every: int | None = _setting(500, "steps between checkpoints")
    checkpoint_minutes: float | None = _setting(None, "minutes between checkpoints")
    keep_checkpoints: int = _setting(5, "checkpoints kept, the newest")
    devices: int | None = _setting(None, "replicas (logical CPU devices without GPUs)")
    accumulate: int = _setting(
        1, "micro-batches per update: the same batch tokens per update in 1/N the memory"
    )
    skip_bad_batches: int = _setting(
        0,
        "skip up to N batches whose gradient norm is NaN or infinite (logged, and counted in "
        "metrics.jsonl), as fairseq does, before stopping as diverged (0: none)",
        metavar="N",
    )
    allow_training_changes: bool = _setting(
        False, "resume with changed batch tokens, dropout or label smoothing (in run.json)"
    )
    precision: str = _setting("float32", "the Keras dtype policy", choices=PRECISIONS)
    jit_compile: bool = _setting(False, "compile the training step with XLA", negatable=True)
    seed: int | None = _setting(1234, "random seed of weights, dropout and data order")
    subwords: Path | None = _setting(
        None,
        "a subword model to use rather than learn one from the training split: a teacher "
        "run's subwords.model for a student on distilled data, or one file for every worker",
        metavar="FILE",
    )
    init_from: Path | None = _setting(
        None,
        "start from this run's weights (an imported or a trained run), with a fresh optimizer "
        "at step 0; the run takes its model settings and tokenizer files. A resume starts from "
        "its own backup",
        metavar="RUN",
    )
    learning_rate_schedule: str = _setting(
        "paper",
        "paper: Eq. 3 (§5.3, the config's warmup_steps and learning_rate_scale); constant: "
        "learning_rate after learning_rate_warmup updates of linear warmup, for fine-tuning",
        choices=LEARNING_RATE_SCHEDULES,
    )
    learning_rate: float | None = _setting(
        None,
        f"the constant schedule's rate (default {FINE_TUNING_LEARNING_RATE:g})",
        metavar="RATE",
    )
    learning_rate_warmup: int | None = _setting(
        None, "the constant schedule's updates of linear warmup (default 0: none)", metavar="N"
    )
    deterministic: bool = _setting(False, "deterministic TF ops")
    log_every: int = _setting(50, "steps between metrics.jsonl lines")
    bleu_every: int | None = _setting(
        1000, "steps between greedy validation BLEU, or F1 for ptb (0: never)", none_at=0
    )
    bleu_sentences: int = _setting(200, "validation sentences to score")
    verbose: int = _setting(1, "Keras's progress output", cli=False)
    # The dataset whose task the run learns, searched and scored as (`task_dataset`).
    task_dataset: str = dataclasses.field(init=False)

    def __post_init__(self):
        from pipelines.datasets import default_data_dir, default_languages, task_dataset
        from pipelines.prepared import MANIFEST_FILE

        self.output = Path(self.output)
        self.data_dir = Path(self.data_dir or default_data_dir(self.dataset))
        if None in (self.source_language, self.target_language):
            source, target = default_languages(self.dataset, self.data_dir)
            self.source_language = self.source_language or source
            self.target_language = self.target_language or target
        if self.dataset != "prepared" and (self.data_dir / MANIFEST_FILE).is_file():
            raise ConfigError(
                f"data_dir {self.data_dir} holds a prepared corpus: its dataset is 'prepared', "
                f"not {self.dataset!r}"
            )
        self.task_dataset = task_dataset(self.dataset, self.data_dir)
        self.subwords = Path(self.subwords) if self.subwords else None
        self.init_from = Path(self.init_from) if self.init_from else None
        if self.init_from and self.subwords:
            raise ConfigError(
                "subwords with init_from: the run takes the vocabulary of init_from's run, "
                "which its weights index"
            )
        self._resolve_learning_rate()
        if self.precision not in PRECISIONS:
            raise ConfigError(f"precision {self.precision!r} must be one of {PRECISIONS}")
        # Caught here, before anything is written: a 0 would otherwise divide by zero in a
        # callback (log_every), or mean "all" where it reads as "none" (keep_checkpoints).
        positive = (
            "max_steps",
            "max_minutes",
            "patience",
            "epochs",
            "checkpoint_minutes",
            "keep_checkpoints",
            "devices",
            "accumulate",
            "log_every",
            "bleu_sentences",
        )
        for name in positive:
            value = getattr(self, name)
            if value is not None and value <= 0:
                raise ConfigError(f"{name} {value} must be positive")
        for name in ("checkpoint_every", "bleu_every", "skip_bad_batches"):
            value = getattr(self, name)
            if value is not None and value < 0:
                raise ConfigError(f"{name} {value} must be positive, or 0 for never")
        if self.skip_bad_batches and self.precision == "mixed_float16":
            # Float16 training runs under Keras's LossScaleOptimizer, which skips the steps
            # whose scaled gradients overflow by design and hides the inner optimizer's
            # `skip_non_finite`: the two rules would fight over the same steps.
            raise ConfigError(
                "skip_bad_batches with precision 'mixed_float16': loss scaling already skips "
                "the steps whose gradients overflow; set skip_bad_batches=0 or another precision"
            )

    def _resolve_learning_rate(self):
        """Checks the schedule's settings and fills in the constant schedule's defaults."""
        if self.learning_rate_schedule not in LEARNING_RATE_SCHEDULES:
            raise ConfigError(
                f"learning_rate_schedule {self.learning_rate_schedule!r} must be one of "
                f"{LEARNING_RATE_SCHEDULES}"
            )
        constant_settings = ("learning_rate", "learning_rate_warmup")
        if self.learning_rate_schedule == "paper":
            given = [name for name in constant_settings if getattr(self, name) is not None]
            if given:
                raise ConfigError(
                    f"{' and '.join(given)} set the constant schedule: set "
                    "learning_rate_schedule='constant', or change Eq. 3 with the config's "
                    "warmup_steps and learning_rate_scale"
                )
            return
        if self.learning_rate is None:
            self.learning_rate = FINE_TUNING_LEARNING_RATE
        if self.learning_rate_warmup is None:
            self.learning_rate_warmup = 0
        if self.learning_rate <= 0:
            raise ConfigError(f"learning_rate {self.learning_rate} must be positive")
        if self.learning_rate_warmup < 0:
            raise ConfigError(
                f"learning_rate_warmup {self.learning_rate_warmup} must be positive, or 0 for none"
            )

    def to_dict(self):
        return {
            k: str(v) if isinstance(v, Path) else v for k, v in dataclasses.asdict(self).items()
        }
