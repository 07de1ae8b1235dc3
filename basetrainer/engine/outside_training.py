"""What a built trainer does besides training: one evaluation with the callbacks, and predictions for a loader.

The third half of :class:`~basetrainer.engine.trainer.EngineTrainer`, beside the hooks (:mod:`.hooks`) and the
requests (:mod:`.requests`): it runs the loop's own evaluation (``test_epoch``) and forward pass
(``autocast``, ``to_device``), so that what it reports is what training reports.
"""
from ..data import loaders as data
from . import evaluation
from .events import CallbackList


class OutsideTraining:
    """Mixed into :class:`~basetrainer.engine.trainer.EngineTrainer`: ``evaluate``, ``predict`` and
    ``predict_step``, the step a task overrides for another batch layout."""

    def evaluate(self, logs=None):
        """Runs only the evaluation loop with the callbacks; returns ``logs["test"]``. Its loaders' workers end too."""
        logs = {"train": {}, "test": {}, **(logs or {})}
        self.events = CallbackList(self.callbacks, trainer=self)
        with data.workers_shut_down_after(self.test_loader):
            try:
                self.test_epoch(logs)
            except evaluation.EvaluationStopped:
                self.preemption.interrupt("during an evaluation outside training (nothing to save)")
        return logs["test"]

    def predict(self, loader):
        """The model's outputs (``predict_step``) for every sample of ``loader``, in dataset order,
        gathered to every rank without the duplicates a padding sampler adds."""
        def step(inputs):
            with self.autocast():
                return self.predict_step(self.to_device(inputs))

        return evaluation.predict(loader, self.model, step, self.strategy)

    def predict_step(self, inputs):
        """The outputs for one batch; override for other batch layouts. By default the model
        applied to the batch, or to its first item when it is a tuple or list (``(images, targets)``)."""
        return self.model(inputs[0] if isinstance(inputs, (tuple, list)) else inputs)
