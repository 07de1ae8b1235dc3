"""What the benchmarks read in a run's output: the closing line's rates, as the engine writes it
(``trained N samples in T | samples/s W over the whole run (...), S in steady state (...)``)."""
import re

CLOSING_LINE = re.compile(r"samples/s (\d+) over the whole run .*, (\d+) in steady state")
