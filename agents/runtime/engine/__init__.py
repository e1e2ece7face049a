"""The step engine. `drive()` is its one entry point; see runner.py."""
