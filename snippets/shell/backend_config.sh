# --8<-- [start:check]
python -m snippets.backend_config check config.json
python -m snippets.backend_config check config.toml
python -m snippets.backend_config check config.env
# --8<-- [end:check]
