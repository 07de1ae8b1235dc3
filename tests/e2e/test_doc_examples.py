"""Every Python script of the README and the documentation runs as it stands, in a fresh folder
beside my_task.py (the script of the own-task guide, which the other examples import); my_task.py
itself runs as its page tells, in one process and in two. tests/docs/test_doc_code_blocks.py
checks the commands and config files without running them."""
import pytest

from support.docs import OWN_TASK_PAGE, code_blocks, own_task_script
from support.processes import run_python

EXAMPLES = [block for block in code_blocks("python") if block.page != OWN_TASK_PAGE]


def in_a_fresh_folder(tmp_path):
    (tmp_path / "my_task.py").write_text(own_task_script())
    return tmp_path


@pytest.mark.parametrize("block", EXAMPLES, ids=str)
def test_every_python_example_of_the_docs_runs(block, tmp_path):
    folder = in_a_fresh_folder(tmp_path)
    (folder / "example.py").write_text(block.text)
    result = run_python(["example.py"], cwd=folder, timeout=300, env={"CUDA_VISIBLE_DEVICES": ""})
    assert result.returncode == 0, f"{block}:\n{result.stderr[-3000:]}"


@pytest.mark.parametrize("arguments", [[], ["--distributed", "--gpu_id", "0", "1"]], ids=["one process", "distributed"])
def test_the_own_task_script_trains_and_saves_its_checkpoint(arguments, tmp_path):
    folder = in_a_fresh_folder(tmp_path)
    result = run_python(["my_task.py", "--num_epochs", "1", "--work_dir", "work", *arguments], cwd=folder,
                        env={"CUDA_VISIBLE_DEVICES": ""})
    assert result.returncode == 0, result.stderr[-3000:]
    assert (folder / "work" / "model" / "last.pth").is_file()
