"""A trainer with a model and nothing to train, for the tasks' ``predict`` commands (classification's CSV,
detection's COCO results): the engine's device placement and ``predict`` loop, without a loader, loss or optimizer."""
from ...engine.trainer import EngineTrainer


class Predictor(EngineTrainer):
    """A trainer with a model and nothing to train: ``predict`` runs the model on this process's device."""

    def __init__(self, model, gpu_id=None):
        self._given_model = model
        super().__init__({"gpu_id": gpu_id, "progress": False})
        self.build(self.cfg)

    def build_train_loader(self, cfg):
        return None

    def build_test_loader(self, cfg):
        return None

    def build_model(self, cfg):
        return self.build_model_parallel(self._given_model)

    def build_criterion(self, cfg):
        return None

    def build_optimizer(self, cfg):
        return None

    def build_callbacks(self, cfg):
        return []
