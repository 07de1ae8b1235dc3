"""Structured pruning: remove channels so the model gets smaller and faster, then fine-tune.

::

    from basetrainer.pruning import model_pruning

    model = build_model(...)
    model = model_pruning(model, input_size=[1, 3, 224, 224], sparsity=0.5, prune_mod="L1",
                          output_prune="work_dir/prune")
    # then wrap (DDP), build the optimizer and train as usual

Backends: ``torch-pruning`` (the default, ``pip install "basetrainer[prune]"``) and
``nni`` (NNI 2.10, ``pip install "basetrainer[nni]"``). A pruned model carries
``model.pruning_spec``; save it with the weights and call ``apply_architecture_spec`` on
a freshly built model before loading them. ``prune_mod="Slim"`` ranks channels by their
BatchNorm scale: train with ``loss + bn_l1_penalty(model, 1e-4)`` before pruning.

Importing this package loads neither torchvision nor a pruning backend.
"""
from .architecture import apply_architecture_spec, architecture_spec
from .pruner import BACKENDS, PRUNE_MODES, model_pruning
from .report import profile_model
from .slim import bn_l1_penalty

__all__ = [
    "BACKENDS",
    "PRUNE_MODES",
    "apply_architecture_spec",
    "architecture_spec",
    "bn_l1_penalty",
    "model_pruning",
    "profile_model",
]
