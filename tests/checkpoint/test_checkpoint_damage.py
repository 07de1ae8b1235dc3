"""Checkpoint files under faults: the previous training state and checksums, damaged files and
resume: auto, a full disk."""
import hashlib
import os
import re

import pytest
import torch

from basetrainer.callbacks.model_checkpoint import ModelCheckpoint
from basetrainer.checkpoint import load_checkpoint, save_checkpoint
from basetrainer.errors import CheckpointError
from support.full_disk import small_filesystem
from support.toy import ToyTrainer, toy_cfg


def trained(tmp_path, **cfg):
    """A run of 1 epoch of 8 steps saving last.pth every 3 steps: last.pth at the epoch end, last.prev.pth at step 6."""
    ToyTrainer(toy_cfg(num_epochs=1, callbacks=[ModelCheckpoint(model_dir=str(tmp_path), every_n_iters=3)],
                       **cfg)).run()
    return tmp_path / "last.pth", tmp_path / "last.prev.pth"


def resume(tmp_path, caplog):
    trainer = ToyTrainer(toy_cfg(num_epochs=1, resume="auto", work_dir=str(tmp_path)))
    with caplog.at_level("WARNING", logger="basetrainer"):
        trainer.resume_or_seed()
    return trainer, [record.getMessage() for record in caplog.records]


# ---------------------------------------------------------------------- the previous checkpoint, checksums
def test_each_save_of_the_training_state_keeps_the_one_before_and_a_checksum_of_each(tmp_path):
    last, previous = trained(tmp_path)
    assert load_checkpoint(str(last))["iteration"] == 8 and load_checkpoint(str(previous))["iteration"] == 6
    for path in (last, previous):
        assert (tmp_path / f"{path.name}.sha256").read_text() == hashlib.sha256(path.read_bytes()).hexdigest() + "\n"


def test_a_bit_flip_in_last_pth_is_caught_by_its_checksum(tmp_path):
    last, _ = trained(tmp_path)
    data = bytearray(last.read_bytes())
    data[-2000] ^= 0x10  # inside a tensor's bytes: torch.load alone would read it without noticing
    last.write_bytes(bytes(data))
    with pytest.raises(CheckpointError, match=r"last.pth does not match its checksum \(.*last.pth.sha256\)"):
        load_checkpoint(str(last))


@pytest.mark.parametrize("damage", ["bit flip", "truncation"])
def test_resume_auto_passes_over_a_damaged_last_pth_to_the_previous_one_and_says_so(tmp_path, caplog, damage):
    last, previous = trained(tmp_path)
    data = bytearray(last.read_bytes())
    if damage == "bit flip":
        data[-2000] ^= 0x10
    else:
        data = data[:3000]
        os.remove(f"{last}.sha256")  # as a kill between a save's renames leaves it
    last.write_bytes(bytes(data))
    trainer, warnings = resume(tmp_path, caplog)
    assert trainer.iteration == 6 and trainer.state.start_batch == 6
    assert warnings[0].startswith(f"resume: auto passes over {last}: ")
    assert warnings[1] == f"resume: auto resumes from {previous}, the checkpoint saved before {last}"


def test_resume_auto_takes_the_previous_checkpoint_when_a_kill_left_no_last_pth(tmp_path, caplog):
    last, previous = trained(tmp_path)
    os.remove(last)  # a kill between moving last.pth aside and putting the new one in its place
    trainer, _ = resume(tmp_path, caplog)
    assert trainer.iteration == 6


def test_an_explicit_resume_path_that_is_damaged_is_an_error_not_a_fallback(tmp_path):
    last, _ = trained(tmp_path)
    last.write_bytes(last.read_bytes()[:3000])
    with pytest.raises(CheckpointError, match="last.pth does not match its checksum"):
        ToyTrainer(toy_cfg(num_epochs=1, resume=str(last))).run()


# ---------------------------------------------------------------------- a full disk
def test_a_full_disk_names_the_path_and_the_bytes_needed_and_keeps_the_previous_checkpoint(tmp_path):
    with small_filesystem(tmp_path / "disk", "2m") as disk:
        path = os.path.join(disk, "last.pth")
        save_checkpoint({"model": {"w": torch.zeros(1000)}}, path, keep_previous=True)
        before = open(path, "rb").read()
        with pytest.raises(CheckpointError) as error:  # 4 MB on a disk of 2: torch.save itself hits the limit
            save_checkpoint({"model": {"w": torch.zeros(1_000_000)}}, path, keep_previous=True)
        message = str(error.value)
        assert message.startswith(f"could not write checkpoint {path}: No space left on device (it needs about 4.0 MB, ")
        assert re.search(r"\d (bytes|[KMGT]B) free\); free some disk space or choose another work_dir \(", message)
        assert message.endswith(f"(the previous checkpoint {path} is intact)") and "\n" not in message
        assert open(path, "rb").read() == before and load_checkpoint(path)["model"]["w"].shape == (1000,)
        assert sorted(os.listdir(disk)) == ["last.pth", "last.pth.sha256"]  # no temporary file left


