# --8<-- [start:causal_documents]
python -m snippets.maskcheck my_masks:causal_documents --q-len 1000 --kv-len 1000
# --8<-- [end:causal_documents]
# --8<-- [start:unpadded_documents]
python -m snippets.maskcheck my_masks:unpadded_documents --q-len 1024 --kv-len 1024
# --8<-- [end:unpadded_documents]
# --8<-- [start:recent_tokens]
python -m snippets.maskcheck my_masks:recent_tokens --q-len 1000 --kv-len 1000
# --8<-- [end:recent_tokens]
