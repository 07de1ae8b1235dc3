"""The ``basetrainer`` command.

::

    basetrainer --version
    basetrainer train -c configs/config.yaml --train_data D/train --test_data D/val
    basetrainer train --help

``train`` runs :mod:`basetrainer.tasks.classification`, the pipeline of
``examples/example.py``, with the same flags and config keys.
"""
import argparse
import sys

from . import __version__


def get_parser():
    parser = argparse.ArgumentParser(prog="basetrainer", description="basetrainer: a PyTorch training engine.")
    parser.add_argument("--version", action="version", version=f"basetrainer {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    commands.add_parser("train", add_help=False,
                        help="train an image classifier on ImageFolder data (basetrainer train --help)")
    return parser


def main(argv=None):
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv and argv[0] == "train":
        # The pipeline parses its own flags, so that `train --help` lists them and precedence is exact.
        from .tasks import classification

        return classification.main(argv[1:], prog="basetrainer train")
    parser = get_parser()
    parser.parse_args(argv)  # --version, --help and unknown commands exit here
    parser.error("give a command, e.g. basetrainer train --help")


if __name__ == "__main__":
    main()
