"""The performance page, generated from the benchmark records at build time.

`<!-- bench: NAME -->` becomes a table, a chart (an SVG file drawn by matplotlib, its text in the
page's language) or a sentence whose numbers come from records/bench/*.json; nothing on the page
is typed by hand, and its numbers and dates are in the page's locale (numbers.py). A record older
than snippets/bench.py is marked as such. BLOCKS names the tables and charts, SENTENCES the values
each sentence of words/<lang>.yaml takes from a record.
"""
import functools
import hashlib
import io
import json
import re
import shutil
from pathlib import Path

from guide import bench as report
from guide import project
from guide.project import GuideError
from guide.site import numbers
from guide.site.numbers import date, number, say

MARKER = re.compile(r"<!-- bench: ([\w-]+) -->")
NAMES = {"flex": "FlexAttention", "flex_flash": "FlexAttention FLASH", "sdpa_flash": "SDPA flash (FA2)",
         "sdpa_cudnn": "SDPA cuDNN", "sdpa_gqa": "SDPA enable_gqa", "gpt_fast_2024": "gpt-fast 2024"}
FLASH_SETTING = 'flex {"BACKEND": "FLASH"}'  # the FLASH backend's variant among the decoding settings


def name(variant, w):
    """A variant's label: a kernel's name, or words of the page's language for a layout."""
    return NAMES.get(variant) or w["name_" + variant]



def fmt(value, digits=3):
    return "—" if value is None else number(value, f".{digits}g")


def words(lang):
    """The page's words in lang: the performance part of words/<lang>.yaml."""
    from guide import i18n

    return i18n.words(lang, "performance")


def gpu_label(record):
    return record["environment"].get("gpu", "?")


def md_table(header, rows):
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines) + "\n"


def charts() -> Path:
    """Where charts are kept between builds: build/charts/ of the checkout."""
    return project.path("build", "charts")
CHART_URL = "CHARTS_URL"  # replaced by the path from the page to the site's assets/charts/


def cached(draw):
    """A chart drawn once per version of its records, language and code: matplotlib takes a
    second or two per chart, and the site draws 28 of them in four languages."""
    @functools.wraps(draw)
    def chart(lang, records):
        key = hashlib.sha256(json.dumps([draw.__name__, lang, words(lang), records], sort_keys=True).encode()
                             + Path(__file__).read_bytes() + Path(numbers.__file__).read_bytes()).hexdigest()[:24]
        path = charts() / f"{key}.svg"
        if not path.exists():
            charts().mkdir(parents=True, exist_ok=True)
            tmp = path.with_suffix(".tmp")
            tmp.write_text(draw(lang, records), encoding="utf-8")
            tmp.replace(path)
        return path.read_text(encoding="utf-8")
    return chart


def overlapping_legends(fig) -> list:
    """The legends of the figure that cover part of a plot, by their first label: a legend belongs
    outside the data, where it hides no point at any width the page is read at."""
    fig.canvas.draw()
    plots = [ax.get_window_extent() for ax in fig.axes]
    legends = fig.legends + [ax.get_legend() for ax in fig.axes if ax.get_legend()]
    return [legend.get_texts()[0].get_text() for legend in legends
            if any(legend.get_window_extent().overlaps(plot) for plot in plots)]


def legend_below(fig, entries, columns):
    """One legend for the whole figure, under its plots: (handle, label) pairs, in `columns` columns."""
    handles, labels = zip(*entries)
    fig.legend(handles, labels, loc="outside lower center", ncol=columns, frameon=False, fontsize=8)


def svg(fig, alt) -> str:
    """The figure as an SVG file (text stays text, in the page's language) and the Markdown that shows
    it; inline, the charts would make every build parse megabytes of SVG for the search index.
    GuideError if a legend covers a plot."""
    import matplotlib.pyplot as plt

    if covering := overlapping_legends(fig):
        plt.close(fig)
        raise GuideError(f"the legend of the chart {alt!r} that begins {covering[0]!r} covers its plot",
                         "place it outside the plots (legend_below)")
    buffer = io.StringIO()
    fig.savefig(buffer, format="svg", bbox_inches="tight", metadata={"Date": None})
    plt.close(fig)
    text = buffer.getvalue()
    key = hashlib.sha256(text.encode()).hexdigest()[:16]
    charts().mkdir(parents=True, exist_ok=True)
    (charts() / f"{key}.svg").write_text(text, encoding="utf-8")
    return f'<p class="bench-chart"><img src="{CHART_URL}/{key}.svg" alt="{alt}"></p>\n'


def figure(width=7.5, height=3.2, columns=1, rows=1):
    import matplotlib

    matplotlib.use("Agg")
    matplotlib.rcParams.update({"svg.fonttype": "none", "font.size": 9,
                                "font.family": ["DejaVu Sans", "Noto Sans CJK SC", "Noto Sans Devanagari"],
                                "svg.hashsalt": "flexattention-guide"})  # the same SVG for the same data
    import matplotlib.pyplot as plt

    return plt.subplots(rows, columns, figsize=(width, height), squeeze=False, layout="constrained")


def environments(lang, records):
    w = words(lang)
    rows = []
    for record in records.values():
        env = record["environment"]
        rows.append([gpu_label(record), date(record["date"]), env.get("torch"), env.get("cuda"), env.get("triton"),
                     number(record['ceilings']['matmul_bf16_tflops'], ".0f"), number(record['ceilings']['copy_gb_per_s'], ".0f"),
                     number(record['seconds'], ".0f")])
    return md_table([w["gpu"], w["date"], "PyTorch", "CUDA", "Triton", w["matmul"], w["copy"], w["seconds"]], rows)


def shape_label(shape):
    return say("{batch} × {tokens}, d={head_dim}", **shape)


@cached
def training(lang, records):
    w = words(lang)
    out = []
    for record in records.values():
        rows, bars = [], {v: [] for v in ("flex", "flex_flash", "sdpa_flash", "sdpa_cudnn")}
        labels = []
        for key, row in report.table(record, "training").items():
            shape = json.loads(key)
            rows.append([shape_label(shape)] + [fmt(row.get(v, {}).get("forward_backward_ms")) for v in bars]
                        + [fmt(report.speedup(row, a, b, "forward_backward_ms")) + "×"
                           for a, b in (("flex", "sdpa_flash"), ("flex", "sdpa_cudnn"), ("flex_flash", "sdpa_cudnn"))])
            labels.append(shape_label(shape))
            for v in bars:
                bars[v].append(row.get(v, {}).get("forward_backward_tflops", 0))
        out.append(f"**{gpu_label(record)}**, {w['fb']}\n")
        out.append(md_table([w["shape"]] + [NAMES[v] for v in bars]
                            + [say(w["vs"], a="Flex", b="FA2"), say(w["vs"], a="Flex", b="cuDNN"),
                               say(w["vs"], a="FLASH", b="cuDNN")], rows))
        fig, axes = figure()
        ax = axes[0][0]
        width = 0.2
        for i, (v, values) in enumerate(bars.items()):
            ax.bar([x + (i - 1.5) * width for x in range(len(labels))], values, width, label=NAMES[v])
        ax.set_xticks(range(len(labels)), labels, rotation=30, ha="right")
        ax.set_ylabel(f"{w['tflops']} ({w['fb'].split(',')[0]})")
        ax.set_title(gpu_label(record))
        legend_below(fig, zip(*ax.get_legend_handles_labels()), columns=2)
        out.append(svg(fig, f"{gpu_label(record)}: {w['tflops']}, {w['fb']}"))
    return "\n".join(out)


def per_gpu(records, header, rows_of) -> str:
    """One table per GPU under its name; rows_of(record) gives the rows."""
    return "\n".join(f"**{gpu_label(record)}**\n\n" + md_table(header, rows_of(record))
                     for record in records.values())


def masks(lang, records):
    w = words(lang)

    def rows_of(record):
        rows = []
        for group in ("sliding", "documents", "score_mod"):
            for key, row in report.table(record, group).items():
                shape = json.loads(key)
                case = (say(w["sliding"], w=shape["window"], t=shape["tokens"]) if group == "sliding" else
                        say(w["documents"], n=shape["documents"], t=shape["tokens"], l=shape["longest"])
                        if group == "documents" else say(w["soft_cap"], t=shape["tokens"]))
                for variant, c in row.items():
                    rows.append([case, name(variant, w), fmt(c.get("forward_ms")), fmt(c.get("forward_backward_ms")),
                                 fmt(c.get("forward_backward_tflops")) if "failed" not in c else w["failed"]])
        return rows
    return per_gpu(records, [w["case"], w["variant"], w["fwd"], w["fb"], w["tflops"]], rows_of)


def gallery(lang, records):
    """The gallery's masks: FlexAttention with a BlockMask against SDPA with the dense mask."""
    w = words(lang)

    def rows_of(record):
        rows = []
        for row in report.table(record, "gallery").values():
            flex, dense = row.get("flex", {}), row.get("sdpa_dense_mask", {})
            shape = flex.get("shape") or dense["shape"]
            x = report.speedup(row, "flex", "sdpa_dense_mask", "forward_backward_ms")
            rows.append([f"`{shape['mask']}`", say(w["gallery_shape"], b=shape["batch"], q=shape["q_tokens"],
                                                    k=shape["kv_tokens"]),
                         fmt(flex.get("forward_backward_ms")) if "failed" not in flex else w["failed"],
                         fmt(dense.get("forward_backward_ms")) if "failed" not in dense else w["failed"],
                         "—" if x is None else say(w["times"], x=x)])
        return rows
    return per_gpu(records, [w["mask"], w["shape"], f'{name("flex", w)}, {w["fb"]}',
                             f'{name("sdpa_dense_mask", w)}, {w["fb"]}', w["dense_over_flex"]], rows_of)


@cached
def decoding(lang, records):
    w = words(lang)
    out = []
    for record in records.values():
        rows, series = [], {}
        bandwidth = record["ceilings"]["copy_gb_per_s"]
        for key, row in report.table(record, "decoding").items():
            s = json.loads(key)
            rows.append([s["model"], number(s["batch"]), number(s["kv_tokens"])]
                        + [fmt(row.get(v, {}).get("forward_ms")) for v in ("flex", "sdpa_gqa", "gpt_fast_2024")]
                        + [fmt(report.speedup(row, "flex", "sdpa_gqa", "forward_ms")) + "×",
                           number(row['flex']['fraction_of_floor'], ".0%") if "fraction_of_floor" in row.get("flex", {}) else "—"])
            panel = series.setdefault((s["model"], s["batch"]), {"kv": [], "floor": []})
            panel["kv"].append(s["kv_tokens"])
            panel["floor"].append(s["kv_bytes"] / bandwidth / 1e6)
            for v in ("flex", "sdpa_gqa", "gpt_fast_2024"):
                panel.setdefault(v, []).append(row.get(v, {}).get("forward_ms"))
        out.append(f"**{gpu_label(record)}**, {w['ms']}\n")
        out.append(md_table([w["model"], w["batch"], w["kv"], NAMES["flex"], NAMES["sdpa_gqa"], NAMES["gpt_fast_2024"],
                             say(w["vs"], a="Flex", b="SDPA"), w["floor"]], rows))
        rows = -(-len(series) // 2)  # two panels a row: readable at a phone's width
        fig, axes = figure(width=7, height=2.4 * rows + 0.8, columns=2, rows=rows)
        for ax, ((model, batch), panel) in zip(axes.flat, series.items()):
            for v in ("flex", "sdpa_gqa", "gpt_fast_2024"):
                ax.plot(panel["kv"], panel[v], marker="o", label=NAMES[v])
            ax.plot(panel["kv"], panel["floor"], linestyle="--", color="gray", label=w["floor_line"])
            ax.set_xscale("log", base=2)
            ax.set_yscale("log")
            ax.set_title(f"{model}, {w['batch'].lower()} {number(batch)}")
            ax.set_xlabel(w["tokens_axis"])
        for row in axes:
            row[0].set_ylabel(w["latency_axis"])
        for ax in list(axes.flat)[len(series):]:
            ax.remove()
        legend_below(fig, zip(*axes[0][0].get_legend_handles_labels()), columns=2)
        fig.suptitle(gpu_label(record))
        out.append(svg(fig, f"{gpu_label(record)}: {w['latency_axis']}"))
    return "\n".join(out)


ROOFLINE_MARKERS = {"flex": "o", "flex_flash": "D", "sdpa_flash": "s", "sdpa_cudnn": "^", "sdpa_gqa": "v",
                    "gpt_fast_2024": "X"}


@cached
def roofline(lang, records):
    """Achieved TFLOP/s against arithmetic intensity, under the GPU's measured ceilings: a colour and a fill
    per GPU (the first filled, the others hollow), a marker per variant; the legend under the plot."""
    from matplotlib.lines import Line2D

    w = words(lang)
    fig, axes = figure(width=7, height=4)
    ax = axes[0][0]
    gpus, variants = [], {}
    for index, (record, color) in enumerate(zip(records.values(), ("tab:blue", "tab:orange", "tab:green"))):
        fill = color if index == 0 else "none"
        peak, bandwidth = record["ceilings"]["matmul_bf16_tflops"], record["ceilings"]["copy_gb_per_s"]
        xs = [0.5 * 1.5 ** i for i in range(25)]
        ax.plot(xs, [min(peak, x * bandwidth / 1e3) for x in xs], color=color)
        gpus.append((Line2D([], [], color=color, marker="o", markerfacecolor=fill),
                     f"{gpu_label(record)}: {w['roof']}"))
        points = []
        for case in report.cases(record, "training"):
            s = case["shape"]
            if "forward_tflops" in case:
                flops = 4 * s["batch"] * s["heads"] * s["tokens"] ** 2 * s["head_dim"] / 2
                traffic = 4 * s["batch"] * s["heads"] * s["tokens"] * s["head_dim"] * 2  # q, k, v, out in bf16
                points.append((flops / traffic, case["forward_tflops"], case["variant"]))
        for case in report.cases(record, "decoding"):
            s = case["shape"]
            if "forward_ms" in case:
                flops = 4 * s["batch"] * s["q_heads"] * s["kv_tokens"] * s["head_dim"]
                points.append((flops / s["kv_bytes"], flops / case["forward_ms"] / 1e9, case["variant"]))
        for variant, marker in ROOFLINE_MARKERS.items():
            chosen = [(x, y) for x, y, v in points if v == variant]
            if chosen:
                ax.scatter(*zip(*chosen), marker=marker, s=22, linewidths=1, edgecolors=color, facecolors=fill)
                variants[variant] = Line2D([], [], color="gray", marker=marker, linestyle="none")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel(w["intensity"])
    ax.set_ylabel(w["tflops"])
    legend_below(fig, gpus + [(handle, NAMES[v]) for v, handle in variants.items()], columns=2)
    return svg(fig, f"{w['tflops']}, {w['intensity']}")


def settings(lang, records):
    w = words(lang)
    out = []
    for record in records.values():
        forward = report.table(record, "forward_settings")
        rows = []
        for row in forward.values():
            cudnn = row.get("sdpa_cudnn", {}).get("forward_ms")
            for variant, c in row.items():
                if variant != "sdpa_cudnn":
                    rows.append([f"`{variant}`", fmt(c.get("forward_ms")),
                                 number(cudnn / c['forward_ms'], ".0%") if cudnn and "forward_ms" in c else w["failed"]])
        out.append(f"**{gpu_label(record)}**, {w['fwd']}\n")
        out.append(md_table([w["setting"], w["fwd"], w["of_cudnn"]], rows))
        decode = report.table(record, "decoding_settings")
        rows = []
        for row in decode.values():
            for variant, c in row.items():
                if variant.startswith("flex"):
                    rows.append([f"`{variant}`", fmt(c.get("forward_ms")),
                                 fmt(report.speedup(row, variant, "sdpa_gqa", "forward_ms")) + "×",
                                 number(c['fraction_of_floor'], ".0%") if "fraction_of_floor" in c else w["failed"]])
        out.append(md_table([w["setting"], w["ms"], say(w["vs"], a="Flex", b="SDPA"), w["floor"]], rows))
    return "\n".join(out)


def gqa(lang, records):
    """enable_gqa=True against repeat_interleave: time and the memory each call allocates."""
    w = words(lang)

    def rows_of(record):
        rows = []
        for key, row in report.table(record, "gqa").items():
            s = json.loads(key)
            training = s["q_tokens"] > 1
            case = say(w["gqa_training" if training else "gqa_decoding"],
                b=s["batch"], t=s["q_tokens"] if training else s["kv_tokens"], hq=s["q_heads"], hkv=s["kv_heads"])
            for variant, c in row.items():
                ms = c.get("forward_backward_ms" if training else "forward_ms")
                rows.append([case, name(variant, w), fmt(ms) if ms else w["failed"], fmt(c.get("peak_mib"), 4)])
        return rows
    return per_gpu(records, [w["case"], w["variant"], w["ms"], w["memory"]], rows_of)


def end_to_end(lang, records):
    """Training steps of a small model: packed documents against the same documents padded."""
    w = words(lang)

    def rows_of(record):
        rows = []
        for key, row in report.table(record, "end_to_end").items():
            for variant, c in row.items():
                rows.append([name(variant, w), number(c["tokens_computed"]) if "tokens_computed" in c else "—",
                             fmt(c.get("step_ms")), number(c["tokens_per_s"], ".0f") if "tokens_per_s" in c
                             else w["failed"], fmt(report.speedup(row, variant, "sdpa_padded", "step_ms")) + "×"])
        return rows
    return per_gpu(records, [w["variant"], w["tokens_computed"], w["step"], w["tokens_s"],
                             w["vs_padded"]], rows_of)


def flash_from(record):
    """The shortest sequence length (tokens) from which FLASH beat cuDNN in forward and backward at
    every training shape of that length or longer; None where it never did."""
    wins = {}
    for key, row in report.table(record, "training").items():
        tokens = json.loads(key)["tokens"]
        wins.setdefault(tokens, []).append(faster(row, ("flex_flash", "sdpa_cudnn"), "forward_backward_ms")
                                           == "flex_flash")
    start = None
    for tokens in sorted(wins, reverse=True):
        if not all(wins[tokens]):
            break
        start = tokens
    return start


def faster(row, variants, key) -> str:
    """The variant of row with the shortest time under key."""
    timed = {v: row[v][key] for v in variants if key in row.get(v, {})}
    return min(timed, key=timed.get)


def choose(lang, records):
    """What to use where, per GPU: the variant its record measured fastest, and by how much."""
    w = words(lang)
    columns = {}
    for key, record in records.items():
        start = flash_from(record)
        flash = [report.speedup(row, "flex_flash", "sdpa_cudnn", "forward_backward_ms")
                 for key, row in report.table(record, "training").items()
                 if start and json.loads(key)["tokens"] >= start]
        triton = report.ratios(record, "training", "sdpa_cudnn", "flex", "forward_backward_ms")
        sliding = next(iter(report.table(record, "sliding").values()))
        documents = next(iter(report.table(record, "documents").values()))
        score = next(iter(report.table(record, "score_mod").values()))
        decoding = report.ratios(record, "decoding", "sdpa_gqa", "flex", "forward_ms")
        best_sliding = faster(sliding, ("flex", "flex_flash"), "forward_backward_ms")
        best_documents = faster(documents, ("flex_packed", "flex_packed_flash"), "forward_backward_ms")
        best_score = faster(score, ("flex", "flex_flash"), "forward_backward_ms")
        columns[gpu_label(record)] = [
            (say(w["use_flash_from"], t=start) if start else w["use_sdpa"],
             say(w["choose_plain"], lo=min(flash), hi=max(flash), tlo=min(triton), thi=max(triton)) if start
             else say(w["choose_plain_cudnn"], tlo=min(triton), thi=max(triton))),
            (w["use_" + best_sliding],
             say(w["choose_sliding"], x=report.speedup(sliding, best_sliding, "sdpa_dense_mask", "forward_backward_ms"))),
            (w["use_" + best_documents.replace("_packed", "")],
             say(w["choose_documents"],
                 x=report.speedup(documents, best_documents, "sdpa_padded", "forward_backward_ms"),
                 y=report.speedup(documents, best_documents, "sdpa_dense_mask", "forward_backward_ms"))),
            (w["use_" + best_score],
             say(w["choose_score_mod"], x=report.speedup(score, best_score, ({"flex", "flex_flash"} - {best_score}).pop(),
                                                        "forward_backward_ms"))),
            (w["use_sdpa_gqa"] if min(decoding) > 1 else w["use_flex"],
             say(w["choose_decoding"], lo=min(decoding), hi=max(decoding)))]
    situations = ("plain", "sliding", "documents", "score_mod", "decoding")
    rows = [[w["situation_" + s]] + [f"**{cells[i][0]}**: {cells[i][1]}" for cells in columns.values()]
            for i, s in enumerate(situations)]
    return md_table([w["situation"]] + list(columns), rows)


def range_of(values) -> dict:
    return {"lo": min(values), "hi": max(values)}


def scaling(record) -> dict:
    by_context = {}
    for key, row in report.table(record, "decoding").items():
        by_context.setdefault(json.loads(key)["kv_tokens"], []).append(
            report.speedup(row, "flex", "sdpa_gqa", "forward_ms"))
    short, long = min(by_context), max(by_context)
    return {"short": short, "long": long, "lo1": min(by_context[short]), "hi1": max(by_context[short]),
            "lo2": min(by_context[long]), "hi2": max(by_context[long])}


def documents_seed(record) -> dict:
    key, row = next(iter(report.table(record, "documents").items()))
    s = json.loads(key)
    return {"n": s["documents"], "t": s["tokens"], "l": s["longest"],
            "x": report.speedup(row, "flex_packed", "sdpa_padded", "forward_backward_ms")}


def end_to_end_gain(record) -> dict:
    row = next(iter(report.table(record, "end_to_end").values()))
    return {"e": report.speedup(row, "flex_packed", "sdpa_padded", "step_ms"),
            "pad": row["sdpa_padded"]["tokens_computed"], "t": row["flex_packed"]["tokens_computed"]}


def flash_speed(record) -> dict:
    """FLASH against cuDNN and against FlexAttention's Triton kernels at the training shapes, in
    forward and backward, and for one decoding step."""
    decode = next(iter(report.table(record, "decoding_settings").values()))
    return {**range_of(report.ratios(record, "training", "flex_flash", "sdpa_cudnn", "forward_backward_ms")),
            **{k + "2": v for k, v in range_of(report.ratios(
                record, "training", "flex_flash", "flex", "forward_backward_ms")).items()},
            **{k + "3": v for k, v in range_of(report.ratios(
                record, "training", "flex_flash", "sdpa_cudnn", "forward_ms")).items()},
            "d": report.speedup(decode, FLASH_SETTING, "sdpa_gqa", "forward_ms"),
            "hf": host_median(record, "flex_flash"), "ht": host_median(record, "flex")}


def host_median(record, variant) -> float:
    """The median CPU time to queue one forward call of variant over the training shapes."""
    import statistics

    return statistics.median(c["host_ms"] for c in report.cases(record, "training") if c["variant"] == variant)


def best_forward(record) -> dict:
    row = next(iter(report.table(record, "forward_settings").values()))
    cudnn = row["sdpa_cudnn"]["forward_ms"]
    timed = {v: c["forward_ms"] for v, c in row.items() if v != "sdpa_cudnn" and "forward_ms" in c}
    best = min(timed, key=timed.get)
    return {"name": f"`{best}`", "best": cudnn / timed[best], "default": cudnn / timed["flex_default"]}


def best_decoding(record) -> dict:
    row = next(iter(report.table(record, "decoding_settings").values()))
    timed = {v: c for v, c in row.items() if v.startswith("flex") and "forward_ms" in c}
    best = min(timed, key=lambda v: timed[v]["forward_ms"])
    return {"name": f"`{best}`", "best": report.speedup(row, best, "sdpa_gqa", "forward_ms"),
            "floor": timed[best]["fraction_of_floor"], "default": report.speedup(row, "flex", "sdpa_gqa", "forward_ms"),
            "dfloor": timed["flex"]["fraction_of_floor"]}


# Each sentence of words/<lang>.yaml's performance part that <!-- bench: NAME --> shows, once per
# GPU, and the values its placeholders take from that GPU's record.
SENTENCES = {
    "seed-fa2": lambda r: range_of(report.ratios(r, "training", "flex", "sdpa_flash", "forward_backward_ms")),
    "seed-fa3": lambda r: {**range_of(report.ratios(r, "training", "sdpa_cudnn", "flex", "forward_backward_ms")),
                           **{k + "2": v for k, v in range_of(report.ratios(
                               r, "training", "flex_flash", "sdpa_cudnn", "forward_backward_ms")).items()}},
    "flash-speed": flash_speed,
    "seed-decoding": lambda r: {
        **range_of(report.ratios(r, "decoding", "flex", "sdpa_gqa", "forward_ms")),
        **{k + "2": v for k, v in range_of(report.ratios(r, "decoding", "flex", "gpt_fast_2024", "forward_ms")).items()}},
    "seed-scaling": scaling,
    "seed-documents": lambda r: {**documents_seed(r), **end_to_end_gain(r)},
    "best-forward": best_forward,
    "best-decoding": best_decoding,
    "training-share": lambda r: range_of([c["forward_tflops"] / r["ceilings"]["matmul_bf16_tflops"]
                                          for c in report.cases(r, "training") if "forward_tflops" in c]),
}


def sentences(lang, records, name):
    """One sentence per GPU, its numbers computed from that GPU's record."""
    w = words(lang)
    return " ".join(say(w[name], gpu=gpu_label(record), **SENTENCES[name](record)) for record in records.values())


BLOCKS = {"environments": environments, "training": training, "masks": masks, "gallery": gallery, "decoding": decoding,
          "roofline": roofline, "settings": settings, "gqa": gqa, "choose": choose, "end-to-end": end_to_end}


def render(name, lang, records):
    if not records:
        raise GuideError("no benchmark record in records/bench/. Fix: run `make bench` on a CUDA machine")
    if name in BLOCKS:
        text = BLOCKS[name](lang, records)
        stale = [gpu_label(r) for r in records.values() if not report.current(r)]
        if stale and name == "choose":  # the page's first block: the warning stands above every number
            text = f'!!! warning "{", ".join(stale)}"\n    {words(lang)["stale"]}\n\n' + text
        return text
    if name in SENTENCES:
        return sentences(lang, records, name)
    raise GuideError(f"unknown benchmark block {name!r}. Fix: one of {', '.join([*BLOCKS, *SENTENCES])}")


def transform(markdown, snapshot, lang, url, site_dir):
    """The page's bench markers rendered; the charts it uses copied to the site's assets/charts/."""
    if "<!-- bench: " not in markdown:
        return markdown
    markdown = MARKER.sub(lambda m: render(m.group(1), lang, dict(snapshot.bench)), markdown)
    target = Path(site_dir) / "assets" / "charts"
    target.mkdir(parents=True, exist_ok=True)
    for name in re.findall(rf"{CHART_URL}/(\w+\.svg)", markdown):
        shutil.copyfile(charts() / name, target / name)
    return markdown.replace(CHART_URL, "../" * url.count("/") + "assets/charts")
