# kloom's image: the API, the workers and the migration step all run it (docker-compose.yml).
# The default torch wheel for Linux x86-64 carries its CUDA libraries, so the same image runs the
# GPU workers (with the NVIDIA container toolkit) and the CPU-only API.
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    KLOOM_CACHE_DIR=/cache

# A C compiler: torch.compile, Triton and inline CUDA/C++ candidates build their kernels at run time.
RUN apt-get update \
    && apt-get install -y --no-install-recommends build-essential \
    && rm -rf /var/lib/apt/lists/*

WORKDIR /app
# torch first, in its own layer: it is large and changes far less often than kloom.
ARG TORCH_SPEC=torch
RUN pip install "${TORCH_SPEC}"

COPY pyproject.toml README.md alembic.ini ./
COPY kloom ./kloom
COPY services ./services
COPY agents ./agents
COPY kernels ./kernels
COPY kb ./kb
COPY suite ./suite
COPY migrations ./migrations
# Editable, so that the suite, the migrations and the dashboard's static files are read from /app.
RUN pip install -e ".[service]"

# Jobs run as an unprivileged user; the compiler caches live in a volume at /cache.
RUN useradd --create-home --uid 10001 kloom && mkdir -p /cache && chown kloom /cache
USER kloom

EXPOSE 8000
CMD ["kloom", "api", "--host", "0.0.0.0", "--port", "8000"]
