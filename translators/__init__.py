"""Translators: pure functions from an external job and its configuration to a JobSet manifest."""
