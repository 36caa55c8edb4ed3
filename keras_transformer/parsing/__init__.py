"""English constituency parsing, §6.3: the translation model trained on linearized trees.

- `constituency`: repairing decoded strings into trees, and their scores (§6.3's search).
- `evalb`: EVALB's labeled bracket F1 (Table 4's metric).
- `pcfg`: the classical treebank-PCFG baseline.

The data is `pipelines.ptb`; the well-formed-tree search is `decoding.tree_constraint`.
"""
