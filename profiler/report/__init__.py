"""Rendering: figures (matplotlib), terminal text and one self-contained HTML page, from analysis results."""
