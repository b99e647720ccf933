# The live ledger's image (`bridge ledger`, the compose file's `ledger` service): the runtime image plus a
# Java runtime and PySpark, which the runtime image leaves out. Build the runtime image first, then:
#
#   ./scripts/images build python:3.11-slim runtime ledger    # or by hand:
#   ./scripts/images ledger-wheels                             # docker/ledger-wheels/: pyspark, pyarrow
#   docker build -f docker/ledger.Dockerfile -t servicebus-bridge-ledger:local .
#
# As in docker/Dockerfile, nothing inside the build reaches a package registry: PySpark is installed with
# `pip install --no-index` from wheels made on the host, into the runtime image's virtualenv (in a throw-away
# stage: the wheels never reach the final image). The Java runtime is copied from JRE_IMAGE (Eclipse
# Temurin's layout: /opt/java/openjdk); any image with a whole Java 17 home at JAVA_DIR does, whose shared
# libraries the runtime image has. An engine that cannot pull uses the stand-in made from Debian's
# openjdk-17-jre-headless (`./scripts/images standin`: servicebus-bridge-jre:bookworm, for a runtime image
# FROM servicebus-bridge-base:bookworm; `./scripts/images build servicebus-bridge-base:bookworm runtime
# ledger` picks it; docs/containers.md).

ARG RUNTIME_IMAGE=servicebus-bridge:local
ARG JRE_IMAGE=eclipse-temurin:17-jre

FROM ${JRE_IMAGE} AS jre

FROM ${RUNTIME_IMAGE} AS install-ledger
USER root
COPY docker/ledger-wheels /tmp/wheels
RUN /opt/bridge/bin/pip install --no-index --find-links /tmp/wheels -r /tmp/wheels/ledger.txt

FROM ${RUNTIME_IMAGE} AS ledger
ARG JAVA_DIR=/opt/java/openjdk
LABEL org.opencontainers.image.title="servicebus-bridge-ledger" \
      org.opencontainers.image.description="The bridge's live ledger: Structured Streaming over the journal"
USER root
COPY --from=jre ${JAVA_DIR} /opt/java/openjdk
COPY --from=install-ledger /opt/bridge /opt/bridge
ENV JAVA_HOME=/opt/java/openjdk \
    PATH=/opt/java/openjdk/bin:/opt/bridge/bin:$PATH
# The JVM runs on this root's libraries, not its image's: fail the build here, not the ledger at its start.
RUN java -version \
    && install -d -o bridge /var/lib/bridge/ledger
USER bridge
ENTRYPOINT ["bridge"]
CMD ["ledger"]
