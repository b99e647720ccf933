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
# Temurin's layout: /opt/java/openjdk); any image with a Java 17 runtime at JAVA_DIR does.

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
RUN install -d -o bridge /var/lib/bridge/ledger
USER bridge
ENTRYPOINT ["bridge"]
CMD ["ledger"]
