"""basetrainer predict --task detection: what it refuses before predicting."""
import pytest
import torch

from basetrainer import cli
from basetrainer.errors import CheckpointError, DataError
from basetrainer.tasks.detection.predict import predict_coco
from test_detection_data import HAND_WRITTEN, write_coco


def a_run(folder, num_classes):
    """A work dir as a detection run leaves it: config.yaml beside model/, and a weights file in model/."""
    (folder / "model").mkdir(parents=True)
    (folder / "config.yaml").write_text(f"net_type: fcos_tiny\nnum_classes: {num_classes}\n")
    torch.save({"w": torch.zeros(1)}, folder / "model" / "model_final.pth")
    return folder / "model" / "model_final.pth"


def test_a_model_file_without_its_runs_config_is_one_line(tmp_path):
    torch.save({"w": torch.zeros(1)}, tmp_path / "weights.pth")
    with pytest.raises(CheckpointError, match="no config.yaml beside the model/ folder"):
        predict_coco(tmp_path / "weights.pth", tmp_path, tmp_path / "instances.json", tmp_path / "out.json")


def test_annotations_of_another_category_count_are_one_line(tmp_path):
    images, annotations = write_coco(tmp_path / "data", HAND_WRITTEN)
    with pytest.raises(DataError, match="has 2 categories, the model 10"):
        predict_coco(a_run(tmp_path / "run", 10), images, annotations, tmp_path / "out.json")
    assert not (tmp_path / "out.json").exists()


def test_predict_with_task_detection_takes_the_detection_flags(capsys):
    with pytest.raises(SystemExit) as ended:
        cli.main(["predict", "--task", "detection", "--help"])
    assert ended.value.code == 0 and "--annotations" in capsys.readouterr().out

