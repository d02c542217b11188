"""``python -m edgekit.cli``: the same as the ``edgekit`` command."""

from edgekit.cli import main

if __name__ == "__main__":
    main()
