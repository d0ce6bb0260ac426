"""Every place cuDNN comes from, one module each, all answering the questions of `base.Source`:
`nvidia` (NVIDIA's redist tree), `mirror` (a copy of it: http(s), file://, a directory),
`pypi` (NVIDIA's wheels on a package index), `local` (an archive or wheel on this machine),
`url` (an archive at an http(s) URL). `tree` holds what the two redist trees share.

Layer: above fetch/ and archive/ (whose readers and naming rules the sources use), below
commands/ (which choose a source from the command line and render what it answers).
"""
