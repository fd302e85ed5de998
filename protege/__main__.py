"""``python -m protege`` runs the same command line as ``protege``."""

from protege.cli import main

main()
