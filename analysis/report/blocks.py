"""A report as a list of blocks (heading, paragraph, bullet list, table, figure), rendered twice: Markdown
and a self-contained HTML page (figures linked relative to it). Tables arrive as DataFrames of display
strings; the HTML goes through pandas' to_html, the Markdown through collect's table writer."""
from __future__ import annotations

import dataclasses
import html
from pathlib import Path

import pandas as pd

from ..collect.table import to_markdown


@dataclasses.dataclass
class Heading:
    text: str
    level: int = 2


@dataclasses.dataclass
class Text:
    text: str


@dataclasses.dataclass
class Bullets:
    items: list[str]


@dataclasses.dataclass
class Table:
    frame: pd.DataFrame     # cells already formatted as strings
    caption: str = ""


@dataclasses.dataclass
class Image:
    path: str               # relative to the report
    title: str
    caption: str
    data: str = ""          # the CSV beside it, relative to the report


def _md_table_cell(_col: str, v) -> str:
    return str(v).replace("|", "\\|").replace("\n", " ")


def markdown(blocks: list) -> str:
    out: list[str] = []
    for b in blocks:
        if isinstance(b, Heading):
            out.append("#" * b.level + " " + b.text)
        elif isinstance(b, Text):
            out.append(b.text)
        elif isinstance(b, Bullets):
            out.append("\n".join(f"- {i}" for i in b.items))
        elif isinstance(b, Table):
            out.append((b.caption + "\n\n" if b.caption else "") + to_markdown(b.frame, _md_table_cell).rstrip())
        elif isinstance(b, Image):
            out.append(f"![{b.title}]({b.path})\n\n*{b.caption}*" + (f" Data: [{Path(b.data).name}]({b.data})."
                                                                      if b.data else ""))
        out.append("")
    return "\n".join(out)


STYLE = """body{font-family:sans-serif;max-width:1400px;margin:2em auto;padding:0 1em;color:#222}
table{border-collapse:collapse;font-size:0.85em;margin:0.5em 0 1em}th,td{border:1px solid #ccc;padding:2px 6px;
text-align:left}th{background:#f0f0f0}img{max-width:100%;border:1px solid #ddd}figcaption{font-size:0.9em;
color:#444;margin-bottom:1.5em}code{background:#f4f4f4}"""


def _inline(text: str) -> str:
    """Markdown's `code` spans as <code>, everything else escaped."""
    parts = html.escape(text).split("`")
    return "".join(f"<code>{p}</code>" if i % 2 else p for i, p in enumerate(parts))


def page(blocks: list, title: str) -> str:
    out = [f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
           f"<style>{STYLE}</style></head><body>"]
    for b in blocks:
        if isinstance(b, Heading):
            out.append(f"<h{b.level}>{_inline(b.text)}</h{b.level}>")
        elif isinstance(b, Text):
            out.append(f"<p>{_inline(b.text)}</p>")
        elif isinstance(b, Bullets):
            out.append("<ul>" + "".join(f"<li>{_inline(i)}</li>" for i in b.items) + "</ul>")
        elif isinstance(b, Table):
            if b.caption:
                out.append(f"<p>{_inline(b.caption)}</p>")
            out.append(b.frame.to_html(index=False, escape=True, border=0))
        elif isinstance(b, Image):
            data = f" Data: <a href='{html.escape(b.data)}'>{html.escape(Path(b.data).name)}</a>." if b.data else ""
            out.append(f"<figure><img src='{html.escape(b.path)}' alt='{html.escape(b.title)}'>"
                       f"<figcaption>{_inline(b.caption)}{data}</figcaption></figure>")
    out.append("</body></html>")
    return "\n".join(out)
