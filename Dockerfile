# One image for every service of docker-compose.yml (the `migrate` service builds it).
# PYTHON_IMAGE: a stand-in where python:3.11-slim cannot be pulled (docker/standins).
ARG PYTHON_IMAGE=python:3.11-slim
FROM ${PYTHON_IMAGE}

ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 PYTHONPATH=/app MCPLET_VAR_DIR=/app/var
WORKDIR /app

# The dependencies in their own layer: editing the source does not reinstall them.
COPY pyproject.toml .
RUN python -c "import tomllib; print('\n'.join(tomllib.load(open('pyproject.toml', 'rb'))['project']['dependencies']))" >/tmp/requirements.txt \
    && pip install -r /tmp/requirements.txt && rm /tmp/requirements.txt \
    && useradd --create-home --uid 1000 mcplet

COPY . .
# var/secrets: the mount point of the secrets volume, created owned by the service user.
RUN SECRET_KEY=collectstatic python manage.py collectstatic --noinput \
    && mkdir -p var/secrets var/metrics && chmod 700 var/secrets && chown -R mcplet var

USER mcplet
EXPOSE 8000
ENTRYPOINT ["/app/docker/entrypoint.sh"]
CMD ["python", "manage.py", "serve", "--host", "0.0.0.0", "--port", "8000"]
