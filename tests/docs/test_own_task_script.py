"""The README and the guide teach one script for "your own task": the README's is the guide's my_task.py."""
from support import REPO
from support.docs import code_blocks, own_task_script


def test_the_readme_shows_the_own_task_guide_script_unchanged():
    readme = [block.text for block in code_blocks("python") if block.page == REPO / "README.md"]
    assert own_task_script() in readme, "copy my_task.py of docs/guides/own-task.md into the README's Your own task"
