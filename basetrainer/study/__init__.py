"""The batch-size study: which batch size reaches a target soonest on your own task (``basetrainer study``).

One training run per batch size, each in its own Python process (an out-of-memory error ends that run
only), under one folder, with the same training arguments, seed and target and the lr scaled with the
global batch (the loop's ``lr_scaling`` and ``target`` keys do the work in each run). The parts:

- :mod:`.plan`: the study's settings, checked before anything is written, and each run's command line;
- :mod:`.process`: one run's process and how it ended;
- :mod:`.table`: a run's row from the files it wrote, and ``study.csv`` / ``study.md``;
- :mod:`.plot`: ``study.png``;
- :mod:`.runner`: the runs in order, the progress lines, and going on after a stop;
- :mod:`.command`: the ``basetrainer study`` command line.

Everything but :mod:`.process` works on files alone and can be used without starting a run.
"""
