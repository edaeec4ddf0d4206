"""The comparison harness behind ``pcops bench`` and ``pcops demo``: cases, peers, exact oracles,
timing, JSON results and the generated report."""

from pcops.bench.run import Config, run, write_json

__all__ = ["Config", "run", "write_json"]
