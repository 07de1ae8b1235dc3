"""Instructions per step by function from ``bench/instructions.py --keep`` dumps: where a step's instructions go,
or, given two dumps (the same variant at two commits), where they moved.

    python bench/callgrind_functions.py DIR/trainer.callgrind [--top 40]
    python bench/callgrind_functions.py OLD/trainer.callgrind NEW/trainer.callgrind [--top 25]

Each function's own instructions (its callees' left out), divided by the steps of the counted window. It reads the
dump itself: ``callgrind_annotate`` 3.19 puts the whole of a window dumped by ``callgrind_control`` on the frame that
was running when the counters were zeroed. The functions' figures add up to the dump's ``totals:`` line, which runs
~470,000 a step above the ``summary:`` that instructions.py reports (at 2416bd8 and 44af8e8 alike): compare them
between dumps, not with instructions.py's figures.
"""
import argparse
import collections
import re

from instructions import OFF, ON  # bench/, beside this script

_NAME = re.compile(r"^(c?fn)=\((\d+)\)(?: (.*))?$")


def own_instructions(path) -> collections.Counter:
    """Instructions by function in the callgrind dump at ``path``, each function's own (lines after ``calls=`` are
    what a call cost, its callee's, and are left out)."""
    names, costs, function, call_cost_next = {}, collections.Counter(), None, False
    with open(path, encoding="utf-8", errors="replace") as dump:
        for line in dump:
            named = _NAME.match(line.rstrip("\n"))
            if named:
                kind, number, name = named.groups()
                names.setdefault(number, name or number)
                if kind == "fn":
                    function = names[number]
            elif line.startswith("calls="):
                call_cost_next = True
            elif line[:1].isdigit() or line[:1] in "+-*":
                fields = line.split()
                if len(fields) >= 2 and not call_cost_next:
                    costs[function] += int(fields[1])
                call_cost_next = False
    return costs


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("dumps", nargs="+", help="one dump, or two to compare (old, then new)")
    parser.add_argument("--top", type=int, default=40)
    args = parser.parse_args()
    if len(args.dumps) > 2:
        parser.error("give one dump, or two to compare")
    steps = OFF - ON
    counted = [own_instructions(path) for path in args.dumps]
    if len(counted) == 1:
        for name, cost in counted[0].most_common(args.top):
            print(f"{cost / steps:>12,.0f}  {name[:150]}")
        return
    old, new = counted
    moved = sorted(((new[name] - old[name]) / steps, name) for name in set(old) | set(new))
    print(f"{'moved':>10}{'old':>12}{'new':>12}  function (instructions per step)")
    for change, name in moved[:args.top] + moved[-args.top:]:
        if change:
            print(f"{change:>+10,.0f}{old[name] / steps:>12,.0f}{new[name] / steps:>12,.0f}  {name[:150]}")


if __name__ == "__main__":
    main()
