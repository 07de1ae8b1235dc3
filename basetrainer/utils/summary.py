"""Old import path of ``SummaryWriter``, a TensorBoard writer that basetrainer no longer wraps."""
raise ImportError(
    "basetrainer.utils.summary was removed: LogHistory writes TensorBoard on the main process; for scalars of your "
    "own use torch.utils.tensorboard.SummaryWriter(log_dir) where basetrainer.engine.comm.is_main_process()"
)
