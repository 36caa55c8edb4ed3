"""Looking at models and runs.

- `evaluation`: sacreBLEU, chrF and tokenized BLEU of a split (or parsing F1), α tuning.
- `learning_curve`: loss and validation BLEU against wall-clock minutes.
- `attention_plot`: attention heads as heat maps (Figures 3-5).
- `model_variations`: Table 3 (§6.2) at the scale of a smaller recipe.
- `parameter_count`: §3's parameter formulas beside Table 3's column.
"""
