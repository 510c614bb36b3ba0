# syntax=docker/dockerfile:1
# Hourglass: a slim, non-root image. Build: docker build -t hourglass .
# Stage 1 builds wheels for the project and its dependencies (mysqlclient, MariaDB's
# driver, compiles against libmariadb-dev); stage 2 installs only those wheels, so
# no build tools or sources end up in the final image.
FROM python:3.11-slim AS build
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
RUN apt-get update \
 && apt-get install -y --no-install-recommends gcc libc6-dev pkg-config libmariadb-dev \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY pyproject.toml README.md ./
COPY app ./app
COPY migrations ./migrations
RUN pip wheel --wheel-dir /wheels '.[mariadb]'

FROM python:3.11-slim
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    # The embedded default keeps its file on a volume; set a postgresql:// (or
    # mariadb://) URL in production.
    HOURGLASS_DATABASE_URL=sqlite:////data/hourglass.db
RUN --mount=type=bind,from=build,source=/wheels,target=/wheels \
    apt-get update \
 && apt-get install -y --no-install-recommends libmariadb3 \
 && rm -rf /var/lib/apt/lists/* \
 && pip install --no-index --find-links /wheels 'hourglass[mariadb]' \
 && useradd --create-home --uid 10001 --user-group hourglass \
 && mkdir /data && chown hourglass:hourglass /data
USER hourglass
WORKDIR /home/hourglass
VOLUME ["/data"]
EXPOSE 8080
# Liveness; docker-compose.yml checks readiness (/readyz: database answers, schema at head).
HEALTHCHECK --interval=10s --timeout=3s --start-period=20s --retries=3 \
    CMD ["python", "-c", "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8080/healthz', timeout=2)"]
# `serve` migrates the schema to head first (HOURGLASS_AUTO_MIGRATE=0 turns that off);
# replicas starting together take turns (PostgreSQL's advisory lock, MariaDB's GET_LOCK).
CMD ["hourglass", "serve", "--host", "0.0.0.0", "--port", "8080"]
