# --8<-- [start:run]
python -m snippets.compiled
# --8<-- [end:run]
