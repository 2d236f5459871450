"""``python -m memstrata`` runs the CLI."""

from memstrata.cli import main

if __name__ == "__main__":
    main()
