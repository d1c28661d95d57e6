"""MkDocs hook: compile the theme's Jinja templates once, not once per language.

The i18n plugin builds the site once per language, each time with a new Jinja environment that
would compile the same ~140 templates again. A bytecode cache shared by those environments,
keyed by template name and source checksum (so an edited template is compiled afresh), keeps
the strict build of all four languages fast.
"""
import jinja2


class SharedBytecodeCache(jinja2.BytecodeCache):
    def __init__(self):
        self.store = {}

    def load_bytecode(self, bucket):
        if bucket.key in self.store:
            bucket.bytecode_from_string(self.store[bucket.key])

    def dump_bytecode(self, bucket):
        self.store[bucket.key] = bucket.bytecode_to_string()


CACHE = SharedBytecodeCache()


def on_env(env, config, files):
    env.bytecode_cache = CACHE
    return env
