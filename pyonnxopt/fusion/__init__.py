"""Fusion: pattern rules matched natively and rewritten in Python.

Write a rule (see rule.py for a worked example) and register it with
`pyonnxopt.passes.register(rule)`; it then runs in the default pipeline.
"""

from pyonnxopt.fusion.pattern import Const, Op, Var
from pyonnxopt.fusion.rule import Edit, Match, Rule

__all__ = ["Const", "Edit", "Match", "Op", "Rule", "Var"]
