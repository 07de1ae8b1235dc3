"""Old import path of the class-balancing resampler; see :mod:`.data_resample`."""
