# --8<-- [start:check]
python -m snippets.backend_config check config.json
python -m snippets.backend_config check config.toml
python -m snippets.backend_config check config.env
# --8<-- [end:check]
# --8<-- [start:misspelt_mechanism]
python -m snippets.backend_config check misspelt_mechanism.json
# --8<-- [end:misspelt_mechanism]
# --8<-- [start:misspelt_key]
python -m snippets.backend_config check misspelt_key.toml
# --8<-- [end:misspelt_key]
# --8<-- [start:syntax]
python -m snippets.backend_config check trailing_comma.json
python -m snippets.backend_config check unquoted_value.toml
# --8<-- [end:syntax]
# --8<-- [start:not_a_config]
mkfifo fifo.json  # a named pipe: opening it would wait for a writer
python -m snippets.backend_config check fifo.json
python -m snippets.backend_config check nested.json
# --8<-- [end:not_a_config]
