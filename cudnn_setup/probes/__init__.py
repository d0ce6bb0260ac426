"""Programs run in child processes: each loads native code that may crash, prints one JSON line
(hashing_tee.py, which feeds rapidgzip an archive and hashes it, excepted).

They use the standard library only (plus numpy where stated), so any interpreter can run them.
"""
