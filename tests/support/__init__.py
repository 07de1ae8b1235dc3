"""What the tests share: paths, the one way to start Python (:mod:`.processes`), result comparisons,
the toy trainer (:mod:`.toy`) and the scripts that tests run as jobs (:mod:`.workers`)."""
import pathlib

TESTS = pathlib.Path(__file__).resolve().parent.parent
REPO = TESTS.parent
EXAMPLES = REPO / "examples"
WORKERS = TESTS / "support" / "workers"
