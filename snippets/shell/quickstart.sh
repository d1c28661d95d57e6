# --8<-- [start:run]
python -m snippets.quickstart
# --8<-- [end:run]
