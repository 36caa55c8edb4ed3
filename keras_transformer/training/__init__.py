"""Training (§5) with `model.fit`, under any tf.distribute strategy, or on JAX under
`keras.distribution`; the loss, metrics and schedule are `objectives`'.

- `trainer`: `train(config, TrainingRun(...))`, the `train` command: resumable, observable runs.
- `optimizer`: Adam (§5.3), with token-weighted gradient accumulation.
- `callbacks`: checkpoints, backups, metrics.jsonl, validation BLEU, stopping rules.
- `distribution`: MirroredStrategy / MultiWorkerMirroredStrategy (§5.2's 8 GPUs).
- `checkpoint_averaging`: §6.1's average of the last checkpoints.
- `distillation`: sequence-level knowledge distillation (beyond the paper).
"""
