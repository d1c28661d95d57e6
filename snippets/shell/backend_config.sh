# --8<-- [start:check]
python -m snippets.backend_config check config.json
# --8<-- [end:check]
