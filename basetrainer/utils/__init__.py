"""Small helpers every layer may use: batches, logging, files, seeding, names, throughput and plots."""
