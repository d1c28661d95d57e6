"""A page is a program: each page's Python blocks, in page order and as the built page shows them,
run as one script (CPU pages here, GPU pages in the GPU tier), and every output the page shows is
printed by that script or by a shell command the page shows; each page downloads as a notebook
and a script in its language, whose code cells are the page's code blocks, and which run."""
import html.parser
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from guide import i18n, pages, records
from guide.project import GuideError
from tests.helpers import ROOT, sh, url_of

LANGS = ("en", "zh", "pt", "hi")
PROGRAMS = pages.programs()
CPU_PAGES = sorted(p for p, tier in PROGRAMS.items() if tier == "cpu")
GPU_PAGES = sorted(p for p, tier in PROGRAMS.items() if tier == "gpu")


class CodeBlocks(html.parser.HTMLParser):
    """The text of each <code> inside a <div class="language-python ..."> of a built page."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.blocks, self.depth, self.in_code = [], 0, False

    def handle_starttag(self, tag, attrs):
        classes = (dict(attrs).get("class") or "").split()
        if tag == "div" and "language-python" in classes:
            self.depth = 1
        elif tag == "div" and self.depth:
            self.depth += 1
        elif tag == "code" and self.depth:
            self.in_code = True
            self.blocks.append("")

    def handle_endtag(self, tag):
        if tag == "code":
            self.in_code = False
        elif tag == "div" and self.depth:
            self.depth -= 1

    def handle_data(self, data):
        if self.in_code:
            self.blocks[-1] += data


def built_python_blocks(site, lang, page) -> list:
    parser = CodeBlocks()
    parser.feed((site / url_of(lang, page).lstrip("/") / "index.html").read_text(encoding="utf-8"))
    return parser.blocks


# The machine's settings that the page keeps: where its packages are installed (GPU machines), and
# where its compilers keep their caches and how many compile processes they start. They change how
# fast the page compiles its kernels, not what it computes.
MACHINE = ("PYTHONPATH", "TORCHINDUCTOR_CACHE_DIR", "TORCHINDUCTOR_COMPILE_THREADS", "TRITON_CACHE_DIR",
           "FLASH_ATTENTION_CUTE_DSL_CACHE_ENABLED")


def run_script(code, cwd, timeout=900):
    """The code as a reader runs it: `python page.py` in an empty folder, no access to the checkout;
    its compiled kernels cached where the machine's are (TRITON_HOME: Triton's cache is in the
    machine's home, not the folder that stands in for the reader's)."""
    script = cwd / "page.py"
    script.write_text(code, encoding="utf-8")
    env = {"PATH": "/usr/bin:/bin", "HOME": str(cwd), "PYTHONDONTWRITEBYTECODE": "1",
           "TRITON_HOME": os.environ.get("TRITON_HOME", os.path.expanduser("~")),
           **{name: os.environ[name] for name in MACHINE if name in os.environ}}
    return subprocess.run([sys.executable, str(script)], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=timeout)


# What a page shows was printed by the page (DESIGN principle 6). A recorded output is reproduced when
# each of its non-empty lines, masked, is part of one masked line of what the page's program and its
# shell commands printed (stdout and stderr: warnings and errors are printed there). Masked, in both,
# is only what differs from run to run and machine to machine: hexadecimal addresses; paths under the
# temporary folder or a home folder (/tmp, /root, /home/<user>: where caches live, named after the user);
# numbers standing alone (decimals, scientific notation, versions, dates and times, a sign; in a GPU
# output integers too, which count bytes and milliseconds there), not those inside a word (float32,
# sm_90); runs of spaces (table columns widen with their numbers). In an output recorded on the CPU an
# integer standing alone (a count of graphs, tokens, blocks) must be printed as shown. A line that
# differs in a word is not reproduced.
MASKS = ((re.compile(r"0x[0-9a-fA-F]+"), "<hex>"),
         (re.compile(r"(?:/tmp|/var/tmp|/root|/home/[^/\s]+|/Users/[^/\s]+)(?:/[^\s'\"(),:]*)*"), "<path>"),
         (re.compile(r"(?<![\w.])-?\d+(?:\.\d+)*(?:[eE][-+]?\d+)?"), "<n>"),
         (re.compile(r"\s+"), " "))


def masked(line: str, integers=False) -> str:
    """The line with what varies masked; integers=True keeps the integers that stand alone."""
    for pattern, mask in ((re.compile(re.escape(tempfile.gettempdir()) + r"(?:/[^\s'\"(),:]*)*"), "<path>"),
                          (re.compile(re.escape(os.path.expanduser("~")) + r"(?:/[^\s'\"(),:]*)*"), "<path>"),
                          *MASKS):
        line = pattern.sub(lambda m: m[0] if integers and mask == "<n>" and re.fullmatch(r"-?\d+", m[0]) else mask,
                           line)
    return line.strip()


def recorded(output_id, gpu):
    """The output as recorded: from the CPU record, or for a GPU output from this machine's record
    (None where this machine has none: a GPU output on a CPU machine)."""
    output = records.load(records.gpu_name() if gpu else "cpu")["outputs"].get(output_id)
    assert output or gpu, f"no recorded output {output_id!r} in records/cpu.json (make record)"
    return output and output["text"]


def unreproduced(page, printed, shown=None) -> list:
    """(output id, line) for each line of an output the page shows that `printed` does not contain;
    shown: {output id: (recorded text, True for a GPU output)}, by default the page's outputs as recorded."""
    if shown is None:
        shown = {oid: (recorded(oid, gpu), gpu) for oid, gpu in pages.observed(page)}
    lines = {exact: [masked(line, exact) for line in printed.splitlines()] for exact in (False, True)}
    return [(oid, line) for oid, (text, gpu) in shown.items() if text for line in text.splitlines()
            if line.strip() and not any(masked(line, not gpu) in p for p in lines[not gpu])]


def assert_reproduced(page, printed, shown=None):
    missing = unreproduced(page, printed, shown)
    assert not missing, f"docs/en/{page} shows outputs that its program and shell commands do not print:\n" + \
        "\n".join(f"  {oid}: {line!r}" for oid, line in missing)


# The files a page tells the reader to save, for its shell commands to read: name -> the file shown
# (None: a named pipe, which the page's shell block makes with mkfifo).
SAVED = {"backend_config.md": {**{f"config.{s}": f"snippets/configs/flex.{s}" for s in ("json", "toml", "env")},
                               **{name: f"snippets/configs/{name}" for name in (
                                   "misspelt_mechanism.json", "misspelt_key.toml", "trailing_comma.json",
                                   "unquoted_value.toml", "nested.json")},
                               "fifo.json": None},
         "maskcheck.md": {"my_masks.py": "snippets/configs/my_masks.py"}}


def run_shown_commands(page, cwd) -> str:
    """What the page's `python -m snippets...` commands print, each run as a reader runs it in a shell:
    in the reader's folder (where the program ran and where the files the page shows are saved), with
    the test's Python first on PATH and the checkout importable (as from the checkout root)."""
    for name, source in SAVED.get(page, {}).items():
        os.mkfifo(cwd / name) if source is None else shutil.copy(ROOT / source, cwd / name)
    printed = []
    for command in pages.commands(page):
        result = sh(command, cwd=cwd, timeout=600)
        printed += [result.stdout, result.stderr]
    return "\n".join(printed)


def test_pages_with_python_code_are_found():
    assert {"index.md", "accuracy.md", "masks.md", "decoding.md"} <= set(PROGRAMS)
    assert "claims.md" not in PROGRAMS  # no code of its own


@pytest.mark.parametrize("lang", LANGS)
@pytest.mark.parametrize("page", sorted(PROGRAMS))
def test_page_code_is_what_the_built_page_shows(site, page, lang):
    want = [block.rstrip("\n") for block in pages.python_blocks(page, lang)]
    assert want, f"{lang}/{page} shows no Python code"
    assert [block.rstrip("\n") for block in built_python_blocks(site, lang, page)] == want


@pytest.mark.gpu
@pytest.mark.parametrize("page", GPU_PAGES)
def test_gpu_page_runs_as_one_script(page, tmp_path):
    import torch

    result = run_script(pages.script(page), tmp_path)
    assert result.returncode == 0, f"docs/en/{page} as one script fails:\n{result.stderr[-3000:]}"
    assert torch.cuda.is_available()
    assert_reproduced(page, "\n".join([result.stdout, result.stderr, run_shown_commands(page, tmp_path)]))


# The CPU pages that show outputs only a GPU run records: their programs print those outputs where a CUDA
# GPU is there (`if torch.cuda.is_available():` sections), as the GPU tests observe them.
CPU_PAGES_WITH_GPU_OUTPUTS = [p for p in CPU_PAGES if any(gpu for _, gpu in pages.observed(p))]


@pytest.mark.gpu
@pytest.mark.cached  # the page's program compiles the kernels the page's GPU tests compile
@pytest.mark.parametrize("page", CPU_PAGES_WITH_GPU_OUTPUTS)
def test_cpu_page_prints_its_gpu_outputs_on_a_gpu(page, tmp_path, alone):
    """On the GPU machine, the CPU page's program (and its shell commands) print every GPU output the
    page shows, as this machine's record has it. The troubleshooting page measures memory and time, and
    exhausts the GPU's memory on purpose: its program runs when no other test does."""
    import contextlib

    import torch

    assert torch.cuda.is_available()
    with alone() if page == "troubleshooting.md" else contextlib.nullcontext():
        result = run_script(pages.script(page), tmp_path)
    assert result.returncode == 0, f"docs/en/{page} as one script fails on the GPU:\n{result.stderr[-3000:]}"
    shown = {oid: (recorded(oid, True), True) for oid, gpu in pages.observed(page) if gpu}  # None: not recorded yet
    assert any(text for text, _ in shown.values()), f"none of docs/en/{page}'s GPU outputs is in records/{records.gpu_name()}.json"
    assert_reproduced(page, "\n".join([result.stdout, result.stderr, run_shown_commands(page, tmp_path)]), shown)


def test_a_page_that_is_not_a_program_fails(tmp_path):
    code = pages.script("kernels.md").replace("print(missing_helper())", "print(missing_helpr())")
    result = run_script(code, tmp_path)
    assert result.returncode == 1 and "NameError: name 'missing_helpr' is not defined" in result.stderr


SHOWN = {"masks.picture_causal": ("48.4% of the blocks skipped at 4096 tokens\n█···\n██··", False),
         "kernels.where": ("inductor  /tmp/torchinductor_root\ntriton    /tmp/torchinductor_root/triton/0", False),
         "paged.check": ("largest difference from SDPA: 3.3e-16 at 0x7f3a2c", False),
         "biases.cost": ("peak memory beyond the inputs: 1530 MiB, 12 ms", True)}


def test_what_varies_from_run_to_run_is_masked_and_nothing_else():
    printed = ("causal: 45.1% of the blocks skipped at 4096 tokens\n█···\n██··\n"
               f"inductor    {tempfile.gettempdir()}/torchinductor_reader\n"
               f"triton {os.path.expanduser('~')}/.cache/triton/0\nlargest difference from SDPA: -1.25e-15 at 0xdeadbeef\n"
               "peak memory beyond the inputs: 1622 MiB, 9 ms")
    assert unreproduced("any.md", printed, SHOWN) == []


def test_an_integer_of_a_cpu_output_must_be_printed_as_shown_and_one_of_a_gpu_output_may_vary():
    printed = "\n".join(text for text, _ in SHOWN.values())
    assert unreproduced("any.md", printed.replace("4096", "8192"), SHOWN) == [
        ("masks.picture_causal", "48.4% of the blocks skipped at 4096 tokens")]
    assert unreproduced("any.md", printed.replace("/0", "/1"), SHOWN) == []  # a path, not a number
    assert unreproduced("any.md", printed.replace("1530", "1531"), SHOWN) == []


@pytest.mark.parametrize("change, output_id, line", [
    ("█···\n", "masks.picture_causal", "█···"),                              # a line not printed
    ("blocks skipped", "masks.picture_causal", "48.4% of the blocks skipped at 4096 tokens"),  # a word differs
    ("inductor", "kernels.where", "inductor  /tmp/torchinductor_root"),
    ("SDPA", "paged.check", "largest difference from SDPA: 3.3e-16 at 0x7f3a2c")])
def test_an_output_the_page_shows_and_does_not_print_fails_with_its_id_and_line(change, output_id, line):
    printed = "\n".join(text for text, _ in SHOWN.values()).replace(change, "mutated\n" if change.endswith("\n") else "mutated")
    with pytest.raises(AssertionError) as failure:
        assert_reproduced("masks.md", printed, SHOWN)
    message = str(failure.value)
    assert message.startswith("docs/en/masks.md shows outputs that its program and shell commands do not print:")
    assert [m.strip() for m in message.splitlines() if m.strip().startswith(tuple(SHOWN))] == [f"{output_id}: {line!r}"]


def test_a_page_whose_program_stops_printing_an_output_fails(tmp_path):
    """The page's real program and record: without its print, kernels.md's first output is missing."""
    code = pages.script("kernels.md").replace("print(missing_helper())", "missing_helper()")
    result = run_script(code, tmp_path)
    assert result.returncode == 0, result.stderr
    shown = {oid: recorded(oid, gpu) for oid, gpu in pages.observed("kernels.md")}
    assert shown["troubleshooting.missing_helper"] and shown["kernels.where"]
    missing = unreproduced("kernels.md", result.stdout + result.stderr + run_shown_commands("kernels.md", tmp_path))
    assert missing == [("troubleshooting.missing_helper", shown["troubleshooting.missing_helper"])]


def test_a_page_runs_with_the_machines_compile_settings_and_nothing_else_of_its_environment(tmp_path, monkeypatch):
    """Inductor reads the machine's compile-process count in the page's process; Triton's cache is the
    machine's; the reader's home is the empty folder; other settings of the test process stay out."""
    monkeypatch.setenv("TORCHINDUCTOR_COMPILE_THREADS", "1")
    monkeypatch.setenv("GUIDE_UNRELATED_SETTING", "1")
    code = ("import os\nfrom torch._inductor import config\n"
            "print(config.compile_threads, os.environ['TRITON_HOME'], os.environ['HOME'],"
            " 'GUIDE_UNRELATED_SETTING' in os.environ)")
    result = run_script(code, tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["1", os.path.expanduser("~"), str(tmp_path), "False"]


def test_a_page_without_a_tier_is_refused(checkout):
    page = checkout / "docs" / "en" / "masks.md"
    text = page.read_text(encoding="utf-8")
    page.write_text(text.replace("program: cpu\n", "program: fast\n"), encoding="utf-8")
    try:
        with pytest.raises(GuideError, match=r"docs/en/masks.md shows Python code but its front matter has no "
                                             r"`program: cpu` or `program: gpu` \(found 'fast'\)"):
            pages.programs()
    finally:  # the copy as it was: what the record's hash of this test reads
        page.write_text(text, encoding="utf-8")


def test_gpu_page_is_one_whose_code_needs_a_gpu(tmp_path):
    """The tier is not a label: on this CPU machine the GPU pages' code stops for want of CUDA."""
    import torch

    if torch.cuda.is_available():
        pytest.skip("a CUDA GPU is present: the GPU pages run in test_gpu_page_runs_as_one_script")
    # flash-attn-4 installs only beside CUDA; its metadata alone (in the script's folder, where Python finds
    # packages) lets a page that prints its version go on to where it needs the GPU
    info = tmp_path / "flash_attn_4-0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: flash-attn-4\nVersion: 0\n", encoding="utf-8")
    for page in GPU_PAGES:
        result = run_script(pages.script(page), tmp_path)
        assert result.returncode != 0 and ("CUDA" in result.stderr), f"docs/en/{page} runs without a GPU: tier it cpu"


# The downloads: a notebook and a script per page and language, built with the site.

def notebook(site, lang, page):
    import nbformat

    folder = site / url_of(lang, page).lstrip("/")
    return nbformat.read(folder / f"{page.removesuffix('.md')}.ipynb", as_version=nbformat.NO_CONVERT)


@pytest.mark.parametrize("lang", LANGS)
@pytest.mark.parametrize("page", sorted(PROGRAMS))
def test_page_downloads_as_notebook_and_script(site, page, lang):
    """Valid nbformat v4; code cells = the built page's code blocks = the English notebook's."""
    import jupytext
    import nbformat

    nb = notebook(site, lang, page)
    nbformat.validate(nb)
    assert nb.nbformat == 4
    code = [c.source for c in nb.cells if c.cell_type == "code"]
    assert code == [b.rstrip("\n") for b in built_python_blocks(site, lang, page)]
    assert code == [b.rstrip("\n") for b in pages.python_blocks(page, "en")]
    assert nb.metadata == notebook(site, "en", page).metadata  # the same kernel: it runs as the English one
    prose = "\n".join(c.source for c in nb.cells if c.cell_type == "markdown")
    assert i18n.title(lang, page) in prose  # the page's own words, in its language
    needs = "needs_gpu" if PROGRAMS[page] == "gpu" else "needs_cpu"
    assert nb.cells[0].source.startswith(i18n.words(lang)["downloads"][needs])
    assert not any(c.get("outputs") for c in nb.cells if c.cell_type == "code")  # none invented
    stem = page.removesuffix(".md")
    script = (site / url_of(lang, page).lstrip("/") / f"{stem}.py").read_text(encoding="utf-8")
    assert [c.source for c in jupytext.reads(script, fmt="py:percent").cells if c.cell_type == "code"] == code


def execute(nb, cwd):
    from nbclient import NotebookClient

    NotebookClient(nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(cwd)}}).execute()
    return nb


@pytest.mark.parametrize("page", CPU_PAGES)
def test_cpu_page_runs_as_a_notebook_and_prints_what_it_shows(page, tmp_path):
    """The page's program, run once, as the English notebook a reader downloads (made as the site makes it): a
    fresh kernel in an empty folder, with the environment run_script gives a script (the machine's compile
    settings and nothing else of the test's). Its code cells are the page's code blocks in page order, as the
    page's script has them (test_page_downloads_as_notebook_and_script: the same in every language's download),
    so it runs the page's code as one program, with what a notebook adds (no __file__, the kernel's own
    sys.argv). Every output the page shows is printed by its cells (stdout or stderr) or by a shell command
    the page shows."""
    from nbclient import NotebookClient

    nb = pages.notebook(i18n.body(ROOT / "docs" / "en" / page), i18n.words("en")["downloads"], "cpu")
    assert [c.source for c in nb.cells if c.cell_type == "code"] == [b.rstrip("\n") for b in pages.python_blocks(page)]
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "PYTHONDONTWRITEBYTECODE": "1",
           "TRITON_HOME": os.environ.get("TRITON_HOME", os.path.expanduser("~")),
           **{name: os.environ[name] for name in MACHINE if name in os.environ}}
    NotebookClient(nb, timeout=900, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}).execute(env=env)
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])]
    printed = "".join(o.get("text", "") for o in outputs if o.output_type == "stream")
    assert_reproduced(page, "\n".join([printed, run_shown_commands(page, tmp_path)]))


def test_notebook_execution_fails_on_broken_code(site, tmp_path):
    from nbclient.exceptions import CellExecutionError

    nb = notebook(site, "en", "kernels.md")
    cell = next(c for c in nb.cells if c.cell_type == "code" and "print(missing_helper())" in c.source)
    cell.source = cell.source.replace("print(missing_helper())", "print(missing_helpr())")
    with pytest.raises(CellExecutionError, match="missing_helpr"):
        execute(nb, tmp_path)


@pytest.mark.gpu
@pytest.mark.cached  # the page's script compiles the same kernels
@pytest.mark.parametrize("page", GPU_PAGES)
def test_gpu_notebook_runs(page, tmp_path):
    """On the GPU machine, which has no site: the notebook made from the English page's Markdown (the
    code cells of every language's notebook are the same, test_page_downloads_as_notebook_and_script)."""
    nb = pages.notebook(i18n.body(ROOT / "docs" / "en" / page), i18n.words("en")["downloads"], "gpu")
    assert [c.source for c in nb.cells if c.cell_type == "code"] == \
        [b.rstrip("\n") for b in pages.python_blocks(page)]
    nb = execute(nb, tmp_path)
    printed = "".join(o.get("text", "") for c in nb.cells for o in c.get("outputs", []))
    assert printed.strip(), "the notebook ran but printed nothing"


def test_a_pages_record_depends_on_what_its_program_and_commands_run(checkout):
    """A page's tests are due again when a file its program or its commands run changes, and only then.
    The oracle for the commands: the standard library's ModuleFinder, which reads each module's
    bytecode for the imports it makes (functions' own imports too), and the files the commands are given."""
    from modulefinder import ModuleFinder

    for page in sorted(set(PROGRAMS) | {p for p in map(os.path.basename, (ROOT / "docs" / "en").glob("*.md"))
                                        if pages.commands(p)}):
        files = {f.relative_to(checkout).as_posix() for f in records.page_sources(page)}
        assert {f"docs/en/{page}", "words/en.yaml"} <= files
        assert set(SAVED.get(page, {}).values()) - {None} <= files, page
        for command in pages.commands(page):
            module = re.match(r"python3? -m snippets(?:\.(\w+)| (\w+))?", command)
            finder = ModuleFinder(path=[str(checkout)])
            finder.run_script(str(checkout / "snippets" / f"{module[1] or module[2] or '__main__'}.py"))
            ran = {Path(m.__file__).relative_to(checkout).as_posix() for name, m in finder.modules.items()
                   if name.startswith("snippets") and m.__file__}
            assert ran <= files, f"{page}: {command} runs {sorted(ran - files)}"

    def hashes():
        return {p: records.source_hash(f"tests/test_pages.py::test_cpu_page_runs_as_a_notebook_and_prints_what_it_shows[{p}]")
                for p in ("biases.md", "blockmask.md", "performance.md")}

    records._digest.cache_clear()
    before = hashes()
    (checkout / "docs" / "en" / "new.md").write_text('--8<-- "snippets/shell/new.sh"\n', encoding="utf-8")
    (checkout / "snippets" / "shell" / "new.sh").write_text("python -m snippets new --fast\npython3 -m snippets\n",
                                                                encoding="utf-8")
    (checkout / "snippets" / "new.py").write_text("def main():\n    from snippets import newer\n", encoding="utf-8")
    (checkout / "snippets" / "newer.py").write_text("print(1)\n", encoding="utf-8")
    assert {"snippets/shell/new.sh", "snippets/newer.py", "snippets/biases.py"} <= \
        {f.relative_to(checkout).as_posix() for f in records.page_sources("new.md")}  # biases: listed
    assert hashes() == before  # a new page stales no other page's tests
    with open(checkout / "snippets" / "blockmask.py", "a", encoding="utf-8") as f:
        f.write("# changed\n")
    with open(checkout / "snippets" / "gallery.py", "a", encoding="utf-8") as f:
        f.write("# changed\n")  # performance.md runs it through snippets/bench.py's import
    after = hashes()
    assert after["biases.md"] == before["biases.md"]
    assert after["blockmask.md"] != before["blockmask.md"] and after["performance.md"] != before["performance.md"]


def test_a_pages_record_stays_current_when_its_prose_changes_and_not_when_its_code_or_outputs_do(checkout):
    """The record hashes a page as its program reads it (records.program_view). The oracle: the page's code
    blocks as the build resolves them, its output markers and its front matter, read from the whole page and
    from the view, are the same for every page; a sentence edited leaves the hash, a code line, an output
    marker or the tier edited changes it; of the interface words, only the part the downloads carry counts."""
    for path in sorted((checkout / "docs" / "en").glob("*.md")):
        whole = path.read_text(encoding="utf-8")
        view = records.program_view(whole)
        for text in (whole, view):
            front, body = i18n.split_front(text)
            found = (front, [p for p in pages.parts(body) if p[0] == "code"], pages.OBSERVED.findall(body))
            assert text is whole or found == first, path.name
            first = found
    page = checkout / "docs" / "en" / "blockmask.md"
    whole = page.read_text(encoding="utf-8")
    view = records.program_view(whole).splitlines()
    prose = next(line for line in whole.splitlines() if len(line) > 40 and line not in view)
    code = next(line for line in whole.splitlines()[whole.splitlines().index("```python") + 1:] if line)
    marker = next(line for line in view if "<!-- observed:" in line)
    key = "tests/test_pages.py::test_cpu_page_runs_as_a_notebook_and_prints_what_it_shows[blockmask.md]"

    def hash_with(old, new):
        page.write_text(whole.replace(old, new, 1), encoding="utf-8")
        records._digest.cache_clear()
        return records.source_hash(key)

    before = hash_with(prose, prose)
    assert hash_with(prose, prose.replace(" ", "  ", 1)) == before
    for old, new in ((code, code + "  # changed"), (marker, ""), ("program: cpu", "program: gpu")):
        assert hash_with(old, new) != before, old
    import yaml

    page.write_text(whole, encoding="utf-8")
    # the interface words: the site's leave it, the downloads' (the notebook's first cell) change it
    words = checkout / "words" / "en.yaml"
    text = words.read_text(encoding="utf-8")
    site_word, download_word = (yaml.safe_load(text)[part][key] for part, key in (("claims", "stale"),
                                                                                     ("downloads", "needs_cpu")))
    for old, changes in ((site_word, False), (download_word, True)):
        words.write_text(text.replace(old, old + " (changed)"), encoding="utf-8")
        records._digest.cache_clear()
        assert (records.source_hash(key) != before) is changes, old
