"""GPU workers: the Celery tasks, the multi-rank evaluator and the hardware profilers."""
