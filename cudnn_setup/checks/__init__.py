"""Verification layers, one module each; every check returns a report.Check."""
