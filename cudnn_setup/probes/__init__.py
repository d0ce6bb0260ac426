"""Programs run in child processes: each loads native code that may crash, prints one JSON line.

They use the standard library only (plus numpy where stated), so any interpreter can run them.
"""
