"""A copy of NVIDIA's redist tree: an http(s) URL, a file:// URL or a directory (what
`cudnn-setup mirror` builds, or a copy made by hand). Its manifests decide what it holds; where
it has none, the known table's archives are asked for one by one (fetch/resolve.py). An archive
the mirror's manifest marks as repacked from a wheel keeps that mark in its provenance."""
from __future__ import annotations

from pathlib import Path

from cudnn_setup.fetch import redist
from cudnn_setup.fetch.remote import Reader
from cudnn_setup.fetch.resolve import Tree
from cudnn_setup.sources.base import MIRROR
from cudnn_setup.sources.tree import RedistTree


class Mirror(RedistTree):
    kind = MIRROR

    def __init__(self, location: str, reader: Reader, cwd: Path | None = None):
        """`location`: a URL or a directory (relative ones against `cwd`)."""
        super().__init__(Tree(redist.normalize_mirror(location, cwd), reader))
