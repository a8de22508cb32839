"""``python -m app.cli``: what supervisors and tests spawn, the same as the ``kairos`` script."""

from app.cli import run

run()
