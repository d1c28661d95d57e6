"""The guide's own machinery: verification records, claims and their verdicts, translations,
benchmark records, the link check, the pytest plugin and the MkDocs plugin.

Page code (`snippets/`) never imports this package; this package reads the project's data files
(records/, claims/, words/, docs/) and, to record a benchmark, calls snippets.bench.
"""
