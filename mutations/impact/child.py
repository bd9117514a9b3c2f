"""A replay's child process: `python -m mutations.impact.child` reads (before, after, prune, work) pickled on
stdin, decides the work and writes decide.decider_answers as JSON on stdout.

A process of its own, started fresh (never a fork of a threaded web worker: it holds no listening
socket, database connection or client connection), at a lower CPU priority than the server, and killed
with its process group when its replay's time budget runs out (mutations/impact/replay.py). It imports
the engine only: no Django, no database, no settings or secrets in its environment.
"""

from __future__ import annotations

import os
import pickle
import sys

import orjson

from .decide import Decider, Outcomes, decider_answers

# Below the web workers: the operator's own pages keep answering while a replay runs.
NICE_INCREMENT = 10


def main() -> int:
    os.nice(NICE_INCREMENT)
    before, after, prune, work = pickle.loads(sys.stdin.buffer.read())  # noqa: S301 - our own parent wrote it
    answers = decider_answers(Decider(before, after, prune, Outcomes()), work)
    sys.stdout.buffer.write(orjson.dumps(answers))
    sys.stdout.buffer.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
