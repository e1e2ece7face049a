"""Conversation state and context assembly: threads that fork, rolling summaries, the
token-budget packer, the hot session cache and the per-step record of what was packed.

See docs/context.md.
"""
