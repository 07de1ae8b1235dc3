"""Mappings of named fields whose fields depend on each other: a kind of value (see :mod:`.kinds`) for a
config key such as ``lr_scaling``, where one field is required only for some values of another."""
from typing import Callable, Optional

from .kinds import Fields, Invalid


class FieldsWhere(Fields):
    """:class:`~basetrainer.config.kinds.Fields` whose checked mapping must also meet a rule across its fields: ``problem(checked)`` says
    what is wrong ("metric is missing"), or returns None; ``condition`` is the rule in words ("metric and value
    set")."""

    def __init__(self, problem: Callable[[dict], Optional[str]], condition: str, **fields):
        super().__init__(**fields)
        self.problem, self.condition = problem, condition

    def check(self, value):
        checked = super().check(value)
        problem = self.problem(checked)
        if problem:
            raise Invalid(problem)
        return checked

    def describe(self, plural=False):
        return f"{super().describe(plural)} with {self.condition}"
