"""The checker runner: `python -m checks list|run|lesson|grade|doctor|diff|watch|help`.

Standard library only, so `make help` and `make doctor` work before the
virtualenv exists.
"""
