"""A loader's batch that still has work to do on the device (uint8 images to make float and normalise) is finished
in one place, after the copy, once per batch: for training, evaluation and ``predict``, on the CPU too."""
import collections

import torch
from torch.utils.data import Dataset

from basetrainer import EngineTrainer
from basetrainer.config import Config
from basetrainer.data.images.on_device import CollateUint8, Uint8Images, normalised
from basetrainer.engine.events import Callback
from basetrainer.utils.batch import has_device_work, move_to_device

MEAN, STD = (0.5, 0.25, 0.0), (0.5, 0.25, 1.0)
FINISHED = collections.Counter()


class CountedUint8Images(Uint8Images):
    __slots__ = ()

    def finish_on_device(self, device, channels_last=False):
        FINISHED["batches"] += 1
        return super().finish_on_device(device, channels_last)


class CountedCollate(CollateUint8):
    def __call__(self, samples):
        images, targets = super().__call__(samples)
        return CountedUint8Images(images.pixels, images.mean, images.std), targets


class Pixels(Dataset):
    """Images of one grey level each: 0 for class 0, 255 for class 1."""

    def __len__(self):
        return 16

    def __getitem__(self, index):
        return torch.full((3, 4, 4), 255 * (index % 2), dtype=torch.uint8), index % 2


class Uint8Trainer(EngineTrainer):
    def __init__(self, cfg):
        super().__init__(cfg)
        self.seen = []
        self.build(cfg)

    def build_train_loader(self, cfg):
        return self.build_dataloader(Pixels(), batch_size=4, collate_fn=CountedCollate(MEAN, STD))

    def build_test_loader(self, cfg):
        return self.build_dataloader(Pixels(), batch_size=8, phase="test", collate_fn=CountedCollate(MEAN, STD))

    def build_model(self, cfg):
        return torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(48, 2))

    def build_criterion(self, cfg):
        return torch.nn.CrossEntropyLoss()

    def build_optimizer(self, cfg):
        return torch.optim.SGD(self.model.parameters(), lr=0.1)

    def build_callbacks(self, cfg):
        return []

    def run_step(self, inputs):
        images, targets = inputs
        self.seen.append(images)
        return super().run_step(inputs)


class Summaries(Callback):
    def __init__(self):
        super().__init__()
        self.types = set()

    def on_train_summary(self, inputs, outputs, losses, epoch, batch, logs):
        self.types.add(type(inputs[0]))


def test_uint8_batches_reach_run_step_as_normalised_floats_finished_once_each():
    FINISHED.clear()
    trainer = Uint8Trainer(Config(num_epochs=2, progress=False))
    summaries = Summaries()
    trainer.callbacks.append(summaries)
    trainer.run()
    assert FINISHED["batches"] == 2 * 4 + 2 * 2  # 4 training and 2 test batches an epoch, each once
    assert summaries.types == {torch.Tensor}
    for images in trainer.seen:
        assert images.dtype == torch.float32
        per_channel = images.amin(dim=(2, 3))
        assert {tuple(row.tolist()) for row in per_channel} == {(-1.0, -1.0, 0.0), (1.0, 3.0, 1.0)}


def test_predict_finishes_the_batch_too():
    trainer = Uint8Trainer(Config(num_epochs=1, progress=False))
    logits = trainer.predict(trainer.test_loader)
    pixels = torch.stack([Pixels()[index][0] for index in range(16)])
    with torch.no_grad():
        assert torch.allclose(logits, trainer.model(normalised(pixels, MEAN, STD)))


def test_move_to_device_finishes_an_element_and_has_device_work_finds_it():
    pixels = Uint8Images(torch.full((2, 3, 2, 2), 255, dtype=torch.uint8), MEAN, STD)
    batch = (pixels, torch.tensor([0, 1]))
    assert has_device_work(batch) and not has_device_work((torch.zeros(1), torch.zeros(1)))
    images, targets = move_to_device(batch, torch.device("cpu"), channels_last=True)
    assert images.is_contiguous(memory_format=torch.channels_last)
    assert images[:, :, 0, 0].tolist() == [[1.0, 3.0, 1.0]] * 2 and targets.tolist() == [0, 1]
