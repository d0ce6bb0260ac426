"""The mirror's engine: a directory in NVIDIA's redist layout built from any source (build.py),
its manifests as typed records (manifest.py) and the directory read and written through
fetch/mirror_tree.py (directory.py). Only commands/mirror.py uses it."""
