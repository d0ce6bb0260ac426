"""NVIDIA's public redist tree (https://developer.download.nvidia.com/compute/cudnn/redist/):
every archive of the known table at the public URL NVIDIA gave it, and every archive its
manifests list; the table is the checksum's authority where it knows the archive."""
from __future__ import annotations

from cudnn_setup.fetch import redist
from cudnn_setup.fetch.remote import Reader
from cudnn_setup.fetch.resolve import Tree
from cudnn_setup.sources.base import NVIDIA
from cudnn_setup.sources.tree import RedistTree


class NvidiaTree(RedistTree):
    kind = NVIDIA

    def __init__(self, reader: Reader):
        super().__init__(Tree(redist.NVIDIA_REDIST, reader))
