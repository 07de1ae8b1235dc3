"""What every task shares instead of copying it: the keys every task reads the same way and the sections of its
``--help`` (:mod:`.settings`), the parser's layout and reading a config from it (:mod:`.command_line`), the run's
folders and first log lines, the clean-up of a run refused at start-up, the launch and the command's error handling
(:mod:`.startup`), and a trainer that only predicts (:mod:`.predictor`)."""
