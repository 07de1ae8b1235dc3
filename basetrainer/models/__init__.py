"""Classification models by name; see :func:`~basetrainer.models.get_models`."""
from .build_models import get_models

__all__ = ["get_models"]
