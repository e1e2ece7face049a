"""The admin console: find stuck runs, see why, repair them (see docs/operations.md)."""
