"""The config keys a classifier is built from by name (:func:`~.build_models.get_models`), declared once.

A task's config holds them (:mod:`basetrainer.tasks.classification.settings`), and a model
file's saved config is checked against them before the model is rebuilt from it
(:mod:`basetrainer.export.from_checkpoint`).
"""
from ..config.kinds import Boolean, Integer, ListOf, Named, Number, OneOf, Text
from ..config.schema import Schema, Setting
from .build_models import model_name

MODEL_SETTINGS = Schema([
    Setting("net_type", Named(model_name, "a torchvision classification model (resnet18, mobilenet_v2, ...) or "
                                          "timm/<name>"),
            "resnet18", "the network (timm/<name>: any model of timm.list_models(), with the timm extra)",
            group="model", flag={}),
    Setting("input_size", ListOf(Integer(minimum=1, maximum=4096), length=2, meaning="[width, height]"), None,
            "network input width and height (null: a timm model's own, else [32, 32])", unit="pixels",
            nullable=True, group="data", flag={"metavar": ("W", "H")}),
    Setting("width_mult", Number(0, 4, above=True), 1.0, "width multiplier, MobileNets only", group="model",
            flag={}),
    Setting("pretrained", OneOf(Boolean(), Text(non_empty=True, meaning="a path")), False,
            "true for the network's pretrained weights (torchvision's ImageNet weights, or a timm model's, fetched "
            "once by timm), or a weights file", group="model"),
    Setting("num_classes", Integer(minimum=1), None, "the number of classes, read from the data", nullable=True,
            group="run"),
    Setting("classes", ListOf(Text()), None, "the class names, read from the data", nullable=True, group="run"),
])
