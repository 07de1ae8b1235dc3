"""The training loop (:class:`~basetrainer.engine.trainer.EngineTrainer`), its events and callbacks'
protocol (:mod:`.events`), the run's state (:mod:`.state`) and the options and parts around the loop."""
