"""Helpers the CLI tests' Python checks share: read a run's --summary from the test's scratch directory,
and compare a run's losses with a reference run's (relative tolerance, the same number of steps).
Used as: sys.path.insert(0, TESTS_CLI); from summaries import Summaries."""
import json


class Summaries:
    def __init__(self, work):
        self.work = work

    def load(self, name):
        with open(f"{self.work}/{name}.json") as file:
            return json.load(file)

    def losses_match(self, name, reference, tolerance, steps=3):
        expected = [s["loss"] for s in self.load(reference)["steps"]]
        actual = [s["loss"] for s in self.load(name)["steps"]]
        assert len(actual) == len(expected) == steps, (name, actual)
        for e, a in zip(expected, actual):
            assert abs(a - e) <= tolerance * abs(e), f"{name}: losses {actual}, one rank {expected}"


def round512(n):
    """Bytes as the allocator rounds them."""
    return (n + 511) // 512 * 512
