"""Old import path of ``DataResample`` and ``ResampleExample``, class balancing that basetrainer does not do."""
raise ImportError(
    "basetrainer.dataloader.data_resample was removed: basetrainer does not resample classes; draw balanced batches "
    "with torch.utils.data.WeightedRandomSampler (weight 1/class count) in your own DataLoader, or weight the "
    "loss with get_criterion(..., class_weight=...)"
)
