"""The learner application: config files, the training loop, reports, client processes."""
