"""Helpers for ferry's end-to-end tests: Azurite, the fault proxy, trees, the manifest format."""
