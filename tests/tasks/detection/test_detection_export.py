"""basetrainer export of a detection run's model file: an ONNX file that onnxruntime runs with torch's boxes,
scores and labels, and the formats it cannot write refused in one line."""
import pytest
import torch

from basetrainer import cli
from basetrainer.tasks.detection.models import get_detector
from basetrainer.tasks.detection.scenes import write_digit_scenes

MODEL = {"net_type": "fcos_tiny", "num_classes": 10, "input_size": [64, 64], "rgb_mean": [0.5] * 3,
         "rgb_std": [0.5] * 3}


@pytest.fixture(scope="module")
def detection_run(tmp_path_factory):
    """A work dir as a detection run leaves it: last.pth (its config, the training weights) and model_final.pth."""
    root = tmp_path_factory.mktemp("run")
    scenes = write_digit_scenes(root / "scenes", split_sizes={"train": 2, "val": 2})
    config = {**MODEL, "train_images": f"{scenes}/train/images", "train_annotations": f"{scenes}/train/instances.json",
              "test_images": f"{scenes}/val/images", "test_annotations": f"{scenes}/val/instances.json"}
    torch.manual_seed(0)
    weights = get_detector(**MODEL).state_dict()
    (root / "model").mkdir()
    torch.save({"config": config, "model": weights, "callbacks": {}}, root / "model" / "last.pth")
    torch.save(weights, root / "model" / "model_final.pth")
    return root


def export(capsys, *arguments):
    with pytest.raises(SystemExit) as ended:
        cli.main(["export", *map(str, arguments)])
        raise SystemExit(0)
    out, err = capsys.readouterr()
    return ended.value.code, out, err


def test_a_detectors_onnx_file_gives_torchs_boxes_scores_and_labels_on_an_image_of_the_run(
        detection_run, tmp_path, capsys):
    code, out, _ = export(capsys, detection_run / "model" / "model_final.pth", "--out", tmp_path / "detector.onnx")
    assert code == 0, out
    assert "onnx check: onnxruntime vs torch on a batch of 1" in out and out.strip().endswith("pass")
    import onnxruntime

    session = onnxruntime.InferenceSession(str(tmp_path / "detector.onnx"), providers=["CPUExecutionProvider"])
    assert [node.name for node in session.get_inputs()] == ["image"]
    assert [node.name for node in session.get_outputs()] == ["boxes", "scores", "labels"]


def test_a_detector_in_another_format_is_a_one_line_refusal_naming_onnx(detection_run, tmp_path, capsys):
    code, _, err = export(capsys, detection_run / "model" / "last.pth", "--out", tmp_path / "detector.ts")
    assert code == 2 and err.strip().splitlines() == [
        "error: --format torchscript: a detector (fcos_tiny) exports as onnx only (--out model.onnx), or as its "
        "weights (--out weights.pth)"]
    assert not (tmp_path / "detector.ts").exists()
