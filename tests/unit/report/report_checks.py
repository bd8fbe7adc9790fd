"""Reading a written report back: its pages' references and its embedded plots."""

from __future__ import annotations

import base64
import html
import io
import re
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
from matplotlib.image import imread

from mallory.report.plots import read_series


class Page(HTMLParser):
    """Every tag's attributes and every <style> text of a page."""

    def __init__(self, text: str) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict]] = []
        self.styles: list[str] = []
        self._in_style = False
        self.feed(text)

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))
        self._in_style = tag == "style"

    def handle_endtag(self, tag):
        self._in_style = False

    def handle_data(self, data):
        if self._in_style:
            self.styles.append(data)

    def images(self) -> list[bytes]:
        prefix = "data:image/png;base64,"
        return [base64.b64decode(a["src"][len(prefix):]) for t, a in self.tags if t == "img"]


def assert_self_contained(path: Path) -> Page:
    page = Page(path.read_text())
    for tag, attrs in page.tags:
        assert tag not in ("script", "link", "iframe", "object", "embed"), (tag, attrs)
        for name in ("src", "href", "xlink:href", "srcset", "action", "data"):
            value = (attrs.get(name) or "").strip().lower()
            assert not value.startswith(("http:", "https:", "//", "ftp:")), (path, tag, attrs)
            if name == "src" and name in attrs:
                assert value.startswith("data:image/png;base64,"), (path, tag)
        assert "url(http" not in (attrs.get("style") or "").replace(" ", "")
    for css in page.styles:
        assert "@import" not in css and "url(" not in css, css
    for tag, attrs in page.tags:  # local links point at files that exist
        href = attrs.get("href")
        if href and not href.startswith("#"):
            assert (path.parent / href).exists(), (path, href)
    return page


def plot_rows(campaign: Path) -> list[list[str]]:
    """plot_data's rows, read here independently of the report's parser."""
    lines = (campaign / "plot_data").read_text().splitlines()
    return [[f.strip() for f in line.split(",")] for line in lines if line.strip() and not line.startswith("#")]


def assert_png(png: bytes) -> np.ndarray:
    image = imread(io.BytesIO(png), format="png")
    assert image.shape[0] > 100 and image.shape[1] > 100
    assert len(np.unique(image.reshape(-1, image.shape[-1]), axis=0)) > 10, "a blank picture"
    return image


def series_named(png: bytes, label: str) -> dict:
    (found,) = [s for s in read_series(png) if s["label"] == label]
    return found


def tables(text: str) -> list[list[list[str]]]:
    """Every table of a page, as rows of cell texts (tags stripped, entities unescaped)."""
    out = []
    for table in re.findall(r"<table>(.*?)</table>", text, re.S):
        rows = re.findall(r"<tr>(.*?)</tr>", table, re.S)
        out.append([[html.unescape(re.sub(r"<[^>]+>", "", c)) for c in re.findall(r"<t[hd]>(.*?)</t[hd]>", r, re.S)]
                    for r in rows])
    return out


def table_headed(text: str, *header: str) -> list[list[str]]:
    """The rows below the header of the page's one table whose header starts with `header`."""
    (found,) = [t for t in tables(text) if t and t[0][: len(header)] == list(header)]
    return found[1:]


def summaries(text: str) -> list[dict[str, str]]:
    """Each campaign's summary (the key-value tables that start with its directory)."""
    return [{k: v for k, v in t} for t in tables(text) if t and t[0][0] == "directory"]

