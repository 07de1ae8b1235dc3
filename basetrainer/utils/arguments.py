"""Positional arguments read in one of several orders: functions whose earlier versions took them differently."""


def as_keywords(function: str, order: tuple, args: tuple, kwargs: dict) -> dict:
    """``kwargs`` with ``args`` added under the names of ``order``; a TypeError, as Python gives, for
    too many arguments or one given both ways."""
    if len(args) > len(order):
        raise TypeError(f"{function}() takes at most {len(order)} positional arguments here ({', '.join(order)}); "
                        f"got {len(args)}")
    named = dict(kwargs)
    for key, value in zip(order, args):
        if key in named:
            raise TypeError(f"{function}() got multiple values for argument {key!r}")
        named[key] = value
    return named
