"""The guide's MkDocs plugin (`guide` in mkdocs.yml's plugins): one snapshot of the data per build,
and the page transformations that read it, in the order plugin.py names."""
