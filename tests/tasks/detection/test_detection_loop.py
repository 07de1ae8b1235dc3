"""The loop's step settings on a detector, in-process on fcos_tiny: bf16 autocast, gradient accumulation and
clipping carry over from the classification task unchanged."""
import math

import pytest
import torch

from basetrainer.engine.events import Callback
from basetrainer.tasks.detection.config import parse_config
from basetrainer.tasks.detection.scenes import write_digit_scenes
from basetrainer.tasks.detection.trainer import DetectionTrainer

LR, CLIP = 0.5, 0.01


class StepRecorder(Callback):
    """The losses of every batch, the parameters after each batch (an optimizer step or not), and the dtype of the
    backbone's features in each training forward."""

    def __init__(self):
        super().__init__()
        self.losses, self.parameters, self.feature_dtypes = [], [], []

    def on_train_begin(self, logs=None):
        self.parameters.append(self.snapshot())
        self.trainer.model.backbone.register_forward_hook(
            lambda module, inputs, features: self.feature_dtypes.append(features["0"].dtype))

    def on_train_summary(self, inputs, outputs, losses, epoch, batch, logs=None):
        self.losses.append({name: float(value.detach()) for name, value in losses.items()})

    def on_batch_end(self, batch, logs=None):
        self.parameters.append(self.snapshot())

    def snapshot(self):
        return [p.detach().float().clone() for p in self.trainer.model.parameters()]


@pytest.fixture(scope="module")
def bf16_accumulated_run(tmp_path_factory):
    root = tmp_path_factory.mktemp("loop")
    scenes = write_digit_scenes(root / "scenes", split_sizes={"train": 8})
    cfg = parse_config(["--train_images", f"{scenes}/train/images", "--train_annotations",
                        f"{scenes}/train/instances.json", "test_images=", "test_annotations=",
                        "--work_dir", str(root / "work"), "--batch_size", "2", "--max_iters", "2", "amp=bf16",
                        "--accumulate_grad_batches", "2", "--clip_grad_norm", str(CLIP), "--lr", str(LR),
                        "momentum=0", "weight_decay=0", "scheduler=constant", "num_warn_up=0", "num_workers=0",
                        "progress=false", "loggers=[]"])
    recorder = StepRecorder()

    class Recorded(DetectionTrainer):
        def build_callbacks(self, cfg, **kwargs):
            return [*super().build_callbacks(cfg), recorder]

    trainer = Recorded(cfg)
    trainer.run()
    return trainer, recorder


def test_bf16_autocast_trains_a_detector_with_finite_losses(bf16_accumulated_run):
    trainer, recorder = bf16_accumulated_run
    assert recorder.feature_dtypes == [torch.bfloat16] * 4 and len(recorder.losses) == 4
    assert all(math.isfinite(value) for losses in recorder.losses for value in losses.values())


def test_accumulating_2_batches_takes_one_optimizer_step_per_2_batches(bf16_accumulated_run):
    trainer, recorder = bf16_accumulated_run
    moved = [any(not torch.equal(a, b) for a, b in zip(before, after))
             for before, after in zip(recorder.parameters, recorder.parameters[1:])]
    assert trainer.state.global_step == 2 and moved == [False, True, False, True]


def test_clip_grad_norm_caps_each_step_of_a_detector(bf16_accumulated_run):
    _, recorder = bf16_accumulated_run
    for before, after in (recorder.parameters[0:3:2], recorder.parameters[2:5:2]):
        update = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(a - b) for a, b in zip(after, before)]))
        assert update.item() == pytest.approx(LR * CLIP, rel=1e-3)  # SGD: the update is lr x the clipped gradient
