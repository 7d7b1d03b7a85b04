"""The service's tables (jobs, steps, events, batches, workers, API keys) and the operations on them
that the API and the workers share."""
