"""Modeling helpers over transformers models: the loaded reader and its prompts, captured prefills,
kvx's attention functions, layer helpers and head masks, greedy decoding, cache costs, memory.
Plugin kinds and the pipeline build on these; they import only ``kvx.core``."""
