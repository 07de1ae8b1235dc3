"""``python -m basetrainer ...``: the same as the ``basetrainer`` command."""
from .cli import main

if __name__ == "__main__":
    main()
