"""Development tools run from the repository root (``python -m scripts.<tool>``); never shipped."""
