# The dts image: the `dts` CLI (worker, MetaService, exporter) and PySpark with Java 17,
# used by every dts service of docker-compose.yml.
FROM python:3.11-slim-bookworm

# Java for PySpark; nothing else from the distribution is needed at run time.
RUN apt-get update \
    && apt-get install -y --no-install-recommends openjdk-17-jre-headless \
    && rm -rf /var/lib/apt/lists/*

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

WORKDIR /opt/dts
# Dependencies first so that code changes do not reinstall them.
COPY pyproject.toml README.md ./
COPY logstore ./logstore
COPY filestore ./filestore
COPY bridge ./bridge
# every role of the stack: worker, MetaService on PostgreSQL, exporter, Spark (pyproject.toml)
RUN pip install '.[all]'

# An unprivileged user owning the warehouse mount point (named volumes inherit it).
RUN useradd --create-home --uid 10001 dts \
    && mkdir -p /warehouse /opt/dts/examples \
    && chown dts:dts /warehouse
USER dts

ENV DTS_WAREHOUSE=/warehouse \
    PYSPARK_PYTHON=python
EXPOSE 6066 8765 9464
ENTRYPOINT ["dts"]
CMD ["--help"]
