"""What the loop does for a detector: a batch of two lists, a dict of losses in training, predictions and no
loss in evaluation, and ``predict`` giving one dict per sample in dataset order."""
import torch
from torch import nn
from torch.utils.data import Dataset

from basetrainer.callbacks import LossesRecorder, MultiLossesRecorder
from basetrainer.engine.trainer import EngineTrainer
from basetrainer.utils.batch import batch_size


class Shapes(Dataset):
    """``n`` images of different sizes, each with ``index % 3`` boxes."""

    def __init__(self, n):
        self.n = n

    def __len__(self):
        return self.n

    def __getitem__(self, index):
        image = torch.full((1, 4 + index % 2, 4), float(index))
        return image, {"boxes": torch.ones(index % 3, 4), "index": torch.tensor(index)}


def two_lists(samples):
    images, targets = zip(*samples)
    return list(images), list(targets)


class Detector(nn.Module):
    """Losses by name in train mode, one prediction per image in eval mode, as torchvision's detectors."""

    def __init__(self):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(()))

    def forward(self, images, targets=None):
        if self.training:
            return {"box": sum(self.weight * len(t["boxes"]) for t in targets) / len(targets),
                    "cls": self.weight * 0 + 1.0}
        return [{"score": image.mean().reshape(1) * self.weight, "size": torch.tensor(image.shape[1:])}
                for image in images]


class DetectorTrainer(EngineTrainer):
    def __init__(self, cfg):
        super().__init__(cfg)
        self.build(cfg)

    def build_train_loader(self, cfg):
        return self.build_dataloader(Shapes(8), 4, collate_fn=two_lists)

    def build_test_loader(self, cfg):
        return self.build_dataloader(Shapes(5), 2, phase="test", shuffle=False, collate_fn=two_lists)

    def build_model(self, cfg):
        return self.build_model_parallel(Detector())

    def build_criterion(self, cfg):
        return None

    def build_optimizer(self, cfg):
        return torch.optim.SGD(self.model.parameters(), lr=0.0)

    def build_callbacks(self, cfg):
        return [LossesRecorder(), MultiLossesRecorder(indicators=["box", "cls"])]

    def run_step(self, inputs):
        images, targets = inputs
        return (None, self.model(images, targets)) if self.model.training else (self.model(images), None)


def trainer():
    return DetectorTrainer({"num_epochs": 1, "progress": False, "work_dir": None})


def test_a_batch_of_two_lists_counts_one_sample_per_image():
    images, targets = two_lists([Shapes(3)[i] for i in range(3)])
    assert batch_size((images, targets)) == 3


def test_each_loss_of_the_dict_is_recorded_by_name_and_their_sum_as_the_loss():
    logs = trainer().run()
    # the 8 images hold 0, 1, 2, 0, 1, 2, 0, 1 boxes: 7 / 8 per image, however they are shuffled into batches
    assert logs["train"]["box"] == 0.875 and logs["train"]["cls"] == 1.0
    assert abs(logs["train"]["loss"] - 1.875) < 1e-6


def test_an_evaluation_without_losses_publishes_no_test_loss():
    logs = trainer().run()
    assert "loss" not in logs["test"] and "box" not in logs["test"]


def test_predict_gives_one_dict_per_sample_in_dataset_order():
    built = trainer()
    predictions = built.predict(built.test_loader)
    assert [float(p["score"]) for p in predictions] == [0.0, 1.0, 2.0, 3.0, 4.0]
    assert [p["size"].tolist() for p in predictions] == [[4, 4], [5, 4], [4, 4], [5, 4], [4, 4]]
