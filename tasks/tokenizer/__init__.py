"""The tokenizer stage: training the byte-level BPE, pruning dirty tokens, extending, reporting."""
