"""Runnable code of the FlexAttention guide: one module per topic, `python -m snippets` lists them."""
