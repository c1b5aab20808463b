"""Sub-commands of ``bayes-microbench``; each module has ``register`` and ``run``."""
