"""The theme's static files listed once per process. MkDocs lists them in every build (once per language,
and again in every `mkdocs serve` rebuild) by walking every file of the theme (Material ships tens of
thousands: its icons) and filtering the names. install() makes Files.add_files_from_theme reuse that
listing while the theme's folders are unchanged: an installed theme's folder is taken as unchanged, a
folder of this project (overrides/) is looked at in every build."""
import os
import sys
from pathlib import Path

from mkdocs.structure.files import File, Files

_add_files_from_theme = Files.add_files_from_theme
_listed = {}


def _installed(folder) -> bool:
    return any(Path(folder).is_relative_to(p) for p in {sys.prefix, sys.base_prefix})


def _state(folder) -> tuple:
    """What of a theme folder a listing depends on: nothing for an installed theme, else every file's path
    and modification time."""
    if _installed(folder):
        return ()
    return tuple(sorted((os.path.join(d, f), os.stat(os.path.join(d, f)).st_mtime_ns)
                        for d, _, names in os.walk(folder) for f in names))


def add_files_from_theme(files, env, config):
    """Files.add_files_from_theme, with the theme's files (path, folder) listed once for the same theme."""
    key = (tuple(config.theme.dirs), tuple(config.theme.static_templates), repr(config["markdown_extensions"]),
           tuple(_state(folder) for folder in config.theme.dirs))
    if key not in _listed:
        alone = Files([])
        _add_files_from_theme(alone, env, config)  # MkDocs' own listing, without the docs' files
        _listed[key] = [(f.src_uri, f.src_dir) for f in alone]
    for path, folder in _listed[key]:
        if files.get_file_from_path(path) is None:  # theme files do not override docs files, as in MkDocs
            files.append(File(path, folder, config.site_dir, config.use_directory_urls))


def install():
    Files.add_files_from_theme = add_files_from_theme
