"""`python -m lmpo.rewards.worker NAME`: the guarded checker process (see `guarded`)."""

import sys

from lmpo.rewards.guarded import serve

if __name__ == "__main__":
    serve(sys.argv[1])
