FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 MCPLET_VAR_DIR=/app/var
WORKDIR /app

COPY . .
RUN pip install --no-cache-dir -e . \
    && SECRET_KEY=collectstatic python manage.py collectstatic --noinput \
    && useradd --create-home --uid 1000 mcplet && chown -R mcplet /app/var

USER mcplet
EXPOSE 8000
CMD ["daphne", "-b", "0.0.0.0", "-p", "8000", "mcplet_host.asgi:application"]
