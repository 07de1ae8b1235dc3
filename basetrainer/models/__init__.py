"""Classification models by name; see :func:`get_models`."""
from .build_models import get_models

__all__ = ["get_models"]
