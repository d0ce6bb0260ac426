# Put on PYTHONPATH by switch.sh: every Python started then (the tool, the bench) hands the
# interpreter's lock on after SWITCH_MS milliseconds instead of 5.
import os
import sys

if os.environ.get("SWITCH_MS"):
    sys.setswitchinterval(float(os.environ["SWITCH_MS"]) / 1000)
