"""The README stays a front page: at most 250 lines, with the runnable example of "your own task" and the two
quick-start commands (the bundled digits, and your own images); the guides say the rest."""
from support import REPO
from support.docs import code_blocks

README = REPO / "README.md"
MAX_LINES = 250


def test_the_readme_is_a_front_page_of_at_most_250_lines():
    assert len(README.read_text(encoding="utf-8").splitlines()) <= MAX_LINES, "move detail into docs/guides"


def test_the_readme_keeps_its_runnable_example_and_the_two_quick_start_commands():
    blocks = [block for block in code_blocks() if block.page == README]
    assert any(block.language == "python" and "class MyTrainer(EngineTrainer)" in block.text for block in blocks)
    commands = "\n".join(block.text for block in blocks if block.language == "bash")
    assert "pip install -e . && python examples/example.py" in commands
    assert "basetrainer train -c configs/config.yaml --train_data /data/train --test_data /data/val" in commands
