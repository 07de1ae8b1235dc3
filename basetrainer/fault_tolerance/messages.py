"""The replica groups' warnings: from each group's first process only, since its others see the same."""
from ..distributed import comm
from ..utils.log import get_logger

logger = get_logger()


def say(message: str, *args) -> None:
    """Logs ``message % args`` as a warning, from this group's first process."""
    if comm.is_main_process():
        logger.warning(message, *args)
