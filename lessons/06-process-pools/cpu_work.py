"""Lesson 06, step 1: the CPU-bound part of an export, in a module a worker can import.

score_text is nothing but a Python loop: no network, no database, nothing to wait for.
It sits at the top level of this file on purpose: a spawned worker process finds the
function by importing `cpu_work` and looking up the name `score_text` -- it cannot
reach into the memory of the process that submitted the work.
"""


def score_text(text: str, rounds: int) -> int:
    """A checksum of `text` repeated `rounds` times: same input, same integer, in any process."""
    total = 0
    for _ in range(rounds):
        for character in text:
            # ord() is stable everywhere; hash() would differ from process to process.
            total = (total * 33 + ord(character)) % 1000000007
    return total
