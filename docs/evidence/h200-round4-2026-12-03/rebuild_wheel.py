"""NVIDIA's wheel rebuilt from its installed files, for a machine that has it installed but not
as a file: every file its RECORD lists, in RECORD's order, deflated at zlib's default level as
the wheel tools write them, under the wheel's own file name.

    python rebuild_wheel.py DIST OUTDIR        (DIST: e.g. nvidia-cudnn-cu13)
"""
import csv
import os
import sys
import zipfile
from importlib import metadata


def main():
    dist = metadata.distribution(sys.argv[1])
    out = sys.argv[2]
    os.makedirs(out, exist_ok=True)
    tag = next((line.split(":", 1)[1].strip() for line in
                (dist.read_text("WHEEL") or "").splitlines() if line.startswith("Tag:")),
               "py3-none-manylinux_2_27_x86_64")
    name = "%s-%s-%s.whl" % (dist.metadata["Name"].replace("-", "_"), dist.version, tag)
    base = os.path.dirname(str(dist.locate_file("")) + "/")
    files = [row[0] for row in csv.reader((dist.read_text("RECORD") or "").splitlines()) if row]
    path = os.path.join(out, name)
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        for rel in files:
            full = os.path.join(base, rel)
            if os.path.isfile(full) and not rel.endswith(".pyc"):
                z.write(full, rel)
    print(path)


if __name__ == "__main__":
    main()
