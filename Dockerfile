# The dts image: the `dts` CLI (worker, MetaService, exporter, ingest, connect) and PySpark
# with Java 17, used by every dts service of docker-compose.yml (and of
# docker-compose.postgres.yml).

# Kafka Connect (the broker's version) and Debezium's PostgreSQL connector, from Maven
# Central as `make connect-jars` fetches them: `dts connect postgres` runs them.
FROM maven:3.9-eclipse-temurin-17 AS connect-jars
ARG KAFKA_VERSION=4.1.1
ARG DEBEZIUM_VERSION=3.6.1.Final
COPY deps/kafka-connect.pom.xml deps/maven-settings.xml /deps/
RUN mvn -q -B -s /deps/maven-settings.xml -f /deps/kafka-connect.pom.xml \
      dependency:copy-dependencies -DincludeScope=runtime -DoutputDirectory=/jars \
      -Dkafka.version=${KAFKA_VERSION} -Ddebezium.version=${DEBEZIUM_VERSION} \
    && touch /jars/.complete

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

# An unprivileged user owning the mount points (named volumes inherit them).
RUN useradd --create-home --uid 10001 dts \
    && mkdir -p /warehouse /connect /opt/dts/examples \
    && chown dts:dts /warehouse /connect
USER dts

COPY --from=connect-jars /jars /opt/dts/connect-jars
ENV DTS_WAREHOUSE=/warehouse \
    DTS_CONNECT_JARS=/opt/dts/connect-jars \
    PYSPARK_PYTHON=python
EXPOSE 6066 8765 9464
ENTRYPOINT ["dts"]
CMD ["--help"]
