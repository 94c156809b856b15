"""A module's weights as safetensors files and Hugging Face folders, out of and into every strategy.

- :mod:`.header`: the safetensors format (an 8-byte length, a JSON header, the tensors' bytes), checked
  before anything is read, and the byte runs of a block of a tensor;
- :mod:`.layout`: which tensor goes into which file of a Hugging Face folder (``max_shard_size``, the index);
- :mod:`.pieces`: what a rank holds of each weight (whole tensors, or its block of a ``DTensor``);
- :mod:`.save` and :mod:`.load`: every rank writes or reads only the bytes of what it holds.

Nothing here unpickles: a safetensors file is data only.
"""
