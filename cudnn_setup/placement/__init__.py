"""The install engine: placing a cuDNN archive into a CUDA root as one transaction, and taking
it out again (engine.py; the steps in judge.py, targets.py, fit.py, same_archive.py, commit.py).
Below the commands, above archive/, checks/, state/ and fetch/."""
