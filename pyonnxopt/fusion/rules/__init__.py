"""The built-in fusion rules, in the order the pipeline runs them."""

BUILTIN_RULES: list = []
