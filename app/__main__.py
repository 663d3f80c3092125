import sys

from app.cli import main

if __name__ == "__main__":  # an engine process started by spawn imports this module without running it
    sys.exit(main())
