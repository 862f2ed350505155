"""The `pyonnxopt` command. Each subcommand is one module with `add_parser`
and `run`; user mistakes become one line on stderr and exit code 2."""

from __future__ import annotations

import argparse
import sys
import traceback

from pyonnxopt import __version__
from pyonnxopt.errors import Error

USER_ERROR = 2


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # one line, not usage + error
        self.exit(USER_ERROR, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def _subcommands():
    from pyonnxopt.cli import demo, info, optimize, passes, report

    return [optimize, info, passes, report, demo]


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="pyonnxopt", description="ONNX model optimizer with a native core.")
    parser.add_argument("--version", action="version", version=f"pyonnxopt {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    for module in _subcommands():
        module.add_parser(sub)
    return parser


def main(argv=None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not args.command:
        parser.print_help()
        return USER_ERROR
    try:
        return args.run(args) or 0
    except Error as e:
        print(f"pyonnxopt: error: {e}", file=sys.stderr)
        return USER_ERROR
    except OSError as e:  # paths the user gave
        print(f"pyonnxopt: error: {e.filename or ''}: {e.strerror or e}", file=sys.stderr)
        return USER_ERROR
    except KeyboardInterrupt:
        print("pyonnxopt: interrupted", file=sys.stderr)
        return 130
    except Exception:
        traceback.print_exc()
        print("pyonnxopt: internal error; please report it with the traceback above", file=sys.stderr)
        return 1
