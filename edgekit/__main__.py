"""``python -m edgekit``: the same as the ``edgekit`` command (where the console script is not on
PATH, e.g. a venv not activated). Part of the CLI layer, though it sits at the package root."""

from edgekit.cli import main

if __name__ == "__main__":
    main()
