"""The REST API (FastAPI): ``services.api.app.create_app`` builds it."""

#: Every route but the dashboard's lives under this prefix.
API_PREFIX = "/api/v1"
