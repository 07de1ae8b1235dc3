"""Processes: starting them (``launch``), their process groups, collectives that are no-ops in one
process (``comm``), stop signals, and the watchdog that ends a stalled rank.

Below the training engine: nothing here knows about models, optimizers or the loop.
"""
