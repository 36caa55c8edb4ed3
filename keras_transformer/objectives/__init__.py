"""What training optimizes, backend-neutral like the model: label-smoothed cross entropy (§5.4),
token accuracy and perplexity, and the learning rate of Eq. 3 (§5.3), in `keras.ops`.

- `losses`: `LabelSmoothedCrossEntropy` and the per-token cross entropy it shares with the
  metrics.
- `metrics`: `MaskedAccuracy`, `Perplexity` and `TargetTokens`, over non-padding tokens.
- `schedule`: `TransformerSchedule`, Eq. 3.
"""
