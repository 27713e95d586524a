# Every target creates .venv if missing and installs the project into it,
# so `make demo` or `make test` alone does all set-up on a fresh machine.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: reference demo test test-tools java-tools connect-jars kafka-jars spark-kafka-jars spark-ext jars bench lint fmt typecheck clean

# Jars fetched once from Maven Central into a cache outside the repository (never committed):
# the Apache Kafka broker that `dts broker`, the demo and the tests run, and Spark's own Kafka
# source for the pinned PySpark. Versions come from logstore/broker.py and pyproject.toml.
DTS_CACHE ?= $(or $(XDG_CACHE_HOME),$(HOME)/.cache)/dts
export DTS_CACHE
KAFKA_VERSION := $(shell sed -n 's/^KAFKA_VERSION = "\(.*\)"/\1/p' logstore/broker.py)
SPARK_VERSION := $(shell sed -n 's/.*"pyspark==\([0-9.]*\)".*/\1/p' pyproject.toml)
KAFKA_JARS := $(DTS_CACHE)/kafka-$(KAFKA_VERSION)
SPARK_KAFKA_JARS := $(DTS_CACHE)/spark-kafka-$(SPARK_VERSION)
MVN_COPY := mvn -q -B -s deps/maven-settings.xml dependency:copy-dependencies -DincludeScope=runtime

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip

$(STAMP): $(BIN)/python pyproject.toml
	$(BIN)/pip install --quiet -e '.[dev,postgres]'
	touch $(STAMP)

# Java 17 (the broker, Spark) and Maven (fetching jars) from Debian when missing and we are
# root with apt-get; otherwise say what to install.
java-tools:
	@missing=""; command -v javac >/dev/null || missing="openjdk-17-jdk-headless"; \
	  command -v mvn >/dev/null || missing="$$missing maven"; \
	  [ -z "$$missing" ] || { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null \
	  && apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
	  --no-install-recommends $$missing >/dev/null; } \
	  || { echo "install$$missing (Java 17 and Maven) first: the broker and Spark need them" >&2; exit 1; }

# .complete is written last, so an interrupted download is fetched again, not half-used.
# The stamp names the pom's checksum (not its time): a fresh clone's newer pom file must
# not throw away a cache another checkout filled from the same pom.
KAFKA_POM_SUM := $(shell cksum < deps/kafka-broker.pom.xml | cut -d' ' -f1)
SPARK_POM_SUM := $(shell cksum < deps/spark-kafka.pom.xml | cut -d' ' -f1)

$(KAFKA_JARS)/.pom-$(KAFKA_POM_SUM): | java-tools
	rm -rf $(KAFKA_JARS) && mkdir -p $(KAFKA_JARS)
	$(MVN_COPY) -f deps/kafka-broker.pom.xml -Dkafka.version=$(KAFKA_VERSION) -DoutputDirectory=$(KAFKA_JARS)
	touch $(KAFKA_JARS)/.complete $@

$(SPARK_KAFKA_JARS)/.pom-$(SPARK_POM_SUM): | java-tools
	rm -rf $(SPARK_KAFKA_JARS) && mkdir -p $(SPARK_KAFKA_JARS)
	$(MVN_COPY) -f deps/spark-kafka.pom.xml -Dspark.version=$(SPARK_VERSION) -DoutputDirectory=$(SPARK_KAFKA_JARS)
	touch $(SPARK_KAFKA_JARS)/.complete $@

# Kafka Connect (the broker's version) with Debezium's PostgreSQL connector: the real source
# `dts connect postgres` and the tests run (versions from logstore/connect.py and broker.py)
DEBEZIUM_VERSION := $(shell sed -n 's/^DEBEZIUM_VERSION = "\(.*\)"/\1/p' logstore/connect.py)
CONNECT_JARS := $(DTS_CACHE)/kafka-connect-$(KAFKA_VERSION)-debezium-$(DEBEZIUM_VERSION)
CONNECT_POM_SUM := $(shell cksum < deps/kafka-connect.pom.xml | cut -d' ' -f1)
$(CONNECT_JARS)/.pom-$(CONNECT_POM_SUM): | java-tools
	rm -rf $(CONNECT_JARS) && mkdir -p $(CONNECT_JARS)
	$(MVN_COPY) -f deps/kafka-connect.pom.xml -Dkafka.version=$(KAFKA_VERSION) \
	  -Ddebezium.version=$(DEBEZIUM_VERSION) -DoutputDirectory=$(CONNECT_JARS)
	touch $(CONNECT_JARS)/.complete $@
connect-jars: $(CONNECT_JARS)/.pom-$(CONNECT_POM_SUM)

kafka-jars: $(KAFKA_JARS)/.pom-$(KAFKA_POM_SUM)
spark-kafka-jars: $(SPARK_KAFKA_JARS)/.pom-$(SPARK_POM_SUM)

# The dts Spark extension (jvm/src: one analyzer rule, reads by name at native speed),
# compiled against the installed PySpark's own jars; rebuilt when its sources change.
SPARK_EXT := $(DTS_CACHE)/dts-spark-ext-$(SPARK_VERSION)
SPARK_EXT_SRC := $(sort $(wildcard jvm/src/io/dts/spark/*.java))
SPARK_EXT_SUM := $(shell cat $(SPARK_EXT_SRC) | cksum | cut -d' ' -f1)
$(SPARK_EXT)/.src-$(SPARK_EXT_SUM): $(STAMP) | java-tools
	rm -rf $(SPARK_EXT) && mkdir -p $(SPARK_EXT)/classes
	javac -nowarn --release 17 -d $(SPARK_EXT)/classes \
	  -cp "$$($(BIN)/python -c 'import pyspark, os; print(os.path.dirname(pyspark.__file__))')/jars/*" \
	  $(SPARK_EXT_SRC)
	jar cf $(SPARK_EXT)/dts-spark-ext.jar -C $(SPARK_EXT)/classes .
	touch $@
spark-ext: $(SPARK_EXT)/.src-$(SPARK_EXT_SUM)
jars: kafka-jars spark-kafka-jars spark-ext connect-jars

demo: $(STAMP) kafka-jars spark-ext
	$(BIN)/dts demo

# Real services and tools some tests run: Prometheus (monitoring), PostgreSQL (MetaService
# on a shared database) and Chromium (the demo's HTML report, loaded headless), from Debian. Installed here when missing and we are root with apt-get;
# otherwise those tests skip with a note.
test-tools:
	@missing=""; command -v prometheus >/dev/null || missing="prometheus"; \
	  ls /usr/lib/postgresql/*/bin/postgres >/dev/null 2>&1 || missing="$$missing postgresql"; \
	  command -v chromium >/dev/null || missing="$$missing chromium"; \
	  [ -z "$$missing" ] || { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null \
	  && apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
	  --no-install-recommends $$missing >/dev/null; } \
	  || echo "note: could not install$$missing (needs root); those tests will be skipped"

# lint and types first: a submission that is not clean does not pass. Two pytest workers
# (a file at a time each: its session fixtures, broker and Spark, are per worker); most
# tests wait on brokers, JVMs and subprocesses, so two overlap well on two cores.
# TEST_WORKERS=0 runs them in one process. Every test's time goes to build/junit.xml (where
# the suite's minutes go: the 35-minute budget is watched file by file).
TEST_WORKERS ?= 2
test: $(STAMP) test-tools jars iceberg-readers lint typecheck
	PYSPARK_PYTHON=$(abspath $(BIN)/python) DTS_ICEBERG_READERS=$(ICEBERG_READERS) $(BIN)/python -m pytest -q -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder --durations=30 \
	  --junitxml=build/junit.xml tests

bench: $(STAMP) jars iceberg-readers
	DTS_ICEBERG_READERS=$(ICEBERG_READERS) $(BIN)/python -m bench.run

# Spark peers benchmark (bench/spark_peers, issue #18): dts beside Apache Paimon's and Delta
# Lake's own Spark connectors on the same data; prints the table with ratios and regenerates
# the results section of bench/README.md. First use creates Paimon's PySpark 3.5 venv
# (bench/.venv-spark-paimon) and fetches the connectors' jars from Maven Central into the
# cache. Smaller run: make bench-peers BENCH_PEERS_ARGS="--rows 200000 --batch-rows 40000"
.PHONY: bench-peers
BENCH_PEERS_ARGS ?=
bench-peers: $(STAMP) java-tools jars
	PYSPARK_PYTHON=$(abspath $(BIN)/python) $(BIN)/python -m bench.spark_peers --readme bench/README.md $(BENCH_PEERS_ARGS)

# Pipeline benchmark (bench/pipeline, issues #25, #42): the seeds' pipeline run by dts and by
# the stack a Delta expert stitches (Spark's Kafka source -> one foreachBatch MERGEing the three
# Delta tables, idempotent) and its Paimon variant (Paimon's Spark 3.5 runtime in its own
# environment, lookup changelog), each one's highest sustained rate searched for (doubling,
# then bisection to 10%), the stitched ones at each trigger of a sweep, all then measured at
# half dts's rate; each side's reader in its own process (dts's API; delta-rs and
# pypaimon-rust, installed into the cache). Prints freshness, consistency and CPU per step, writes
# bench/results/pipeline.{json,html} and the results section of bench/README.md.
# Shorter: make bench-pipeline BENCH_PIPELINE_ARGS="--first-rate 2000 --step-seconds 30 --delta-triggers '2 seconds'"
.PHONY: bench-pipeline
BENCH_PIPELINE_ARGS ?=
bench-pipeline: $(STAMP) java-tools jars
	PYSPARK_PYTHON=$(abspath $(BIN)/python) $(BIN)/python -m bench.pipeline --readme bench/README.md $(BENCH_PIPELINE_ARGS)

# Readers nobody here wrote, in their own environment (their pins are not ours): pyiceberg
# and DuckDB with PyPI's iceberg and avro extension packages (no download at run time),
# which tests/filestore/iceberg run against the Iceberg metadata dts writes; pyiceberg's
# SQLite catalog writes the peer copy of bench/bench_iceberg.py.
ICEBERG_READERS := $(DTS_CACHE)/venv-iceberg-readers-2
ICEBERG_READER_PKGS := "pyiceberg[pyarrow,sql-sqlite]==0.12.0" duckdb==1.4.4 \
  duckdb-ext-iceberg==1.4.4.20260205 duckdb-ext-avro==1.4.4.20260205
$(ICEBERG_READERS)/.complete:
	rm -rf $(ICEBERG_READERS)
	$(PYTHON) -m venv $(ICEBERG_READERS)
	$(ICEBERG_READERS)/bin/pip install --quiet $(ICEBERG_READER_PKGS)
	touch $@
.PHONY: iceberg-readers
iceberg-readers: $(ICEBERG_READERS)/.complete

# Soak (bench/soak, issue #40): dts's side of the pipeline benchmark at one steady rate for
# 60 minutes with compaction, snapshot expiration, orphan cleanup and Kafka retention on,
# sampled every minute. Fails when a series (memory, CPU, threads, open files, table files,
# manifests, snapshots, checkpoint/spill/Kafka directories, freshness, reads) grows beyond
# its noise over the run's last two thirds, a strong read disagrees, or the final tables
# differ from the oracle; writes bench/results/soak.{json,html}. Not part of `make test`.
# Shorter: make soak SOAK_ARGS="--minutes 5 --sample-seconds 20"
.PHONY: soak
SOAK_ARGS ?=
soak: $(STAMP) java-tools jars
	PYSPARK_PYTHON=$(abspath $(BIN)/python) $(BIN)/python -m bench.soak $(SOAK_ARGS)

# The API reference (docs/reference/*.html) from the public API's docstrings, by pdoc;
# tests/docs/test_api_reference.py fails when the checked-in pages are stale.
reference: $(STAMP)
	$(BIN)/python docs/reference/build_reference.py

lint: $(STAMP)
	$(BIN)/ruff format --check .
	$(BIN)/ruff check .

fmt: $(STAMP)
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

typecheck: $(STAMP)
	$(BIN)/mypy --strict

clean:
	rm -rf $(VENV) .pytest_cache build *.egg-info
