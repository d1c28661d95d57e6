# --8<-- [start:run]
python -m snippets.head_dims
# --8<-- [end:run]
