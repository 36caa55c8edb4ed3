"""Decoding (§6.1): from source ids, or sentences, to translations.

- `search`: greedy and beam decoding on the preallocated cache; their settings travel as one
  `search_settings.SearchSettings` (§6.1's: beam 4, α = 0.6, input length + 50).
- `beam_search`: the beam search itself, with its length penalty and early termination.
- `ensemble`: several models decoding as one.
- `forced`: forced decoding (scores of given translations) and word alignments.
- `tree_constraint`: §6.3's well-formed-tree constraint on a parser's search.
- `translator`: `Translator` (sentences in, translations, n-best lists or scores out) and
  `load_run`.
"""
