# --8<-- [start:install]
pip install flash-attn-4
# --8<-- [end:install]

# --8<-- [start:run]
python -m snippets.flash
# --8<-- [end:run]
