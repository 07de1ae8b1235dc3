"""What every task shares instead of copying it:

- :mod:`~basetrainer.tasks.common.settings`: the keys every task reads the same way, the sections of its ``--help``;
- :mod:`~basetrainer.tasks.common.command_line`: the parser's layout and reading a config from it;
- :mod:`~basetrainer.tasks.common.startup`: the run's folders and first log lines, the clean-up of a run refused at
  start-up, the launch and the command's error handling;
- :mod:`~basetrainer.tasks.common.predictor`: a trainer that only predicts.
"""
