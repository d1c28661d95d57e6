# --8<-- [start:doctor]
python -m snippets doctor
# --8<-- [end:doctor]

# --8<-- [start:doctor_json]
python -m snippets doctor --json
# --8<-- [end:doctor_json]
