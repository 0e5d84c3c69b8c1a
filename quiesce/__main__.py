"""`python -m quiesce ...`: the same command line as `quiesce ...`."""

from quiesce.cli import main

if __name__ == "__main__":
    main()
