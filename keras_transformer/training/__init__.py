"""Training (§5) with `model.fit`, under any tf.distribute strategy.

- `trainer`: `train(config, TrainingRun(...))`, the `train` command: resumable, observable runs.
- `optimizer`: Adam and the learning-rate schedule of Eq. 3 (§5.3).
- `losses`: label-smoothed cross entropy (§5.4); `metrics`: token accuracy and perplexity.
- `callbacks`: checkpoints, backups, metrics.jsonl, validation BLEU, stopping rules.
- `distribution`: MirroredStrategy / MultiWorkerMirroredStrategy (§5.2's 8 GPUs).
- `checkpoint_averaging`: §6.1's average of the last checkpoints.
- `distillation`: sequence-level knowledge distillation (beyond the paper).
"""
