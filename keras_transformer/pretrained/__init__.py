"""Pretrained translation models from elsewhere, as run directories of this package.

- `marian`: a Hugging Face Marian (OPUS-MT) checkpoint, its settings mapped onto
  `TransformerConfig` (or refused, by name) and its weights onto the `Transformer`'s.
- `marian_release`: a model as Marian itself releases it (model .npz, decoder.yml, vocabulary
  .yml), read as the Hugging Face checkpoint transformers' converter would make of it.
- `tensor_files`: the tensors of `model.safetensors` and `pytorch_model.bin`, without PyTorch.
- `importer`: `import_checkpoint`, the run directory `keras-transformer import` writes, from a
  directory or a Hugging Face Hub name.
"""
