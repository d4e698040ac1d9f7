# syntax=docker/dockerfile:1
#
# The agentd image that helm/forever runs:
#
#   docker build -t ghcr.io/forever-agents/agentd:0.1.0 .
#
# A static binary (CGO_ENABLED=0: Pebble and nats-server are pure Go) on
# distroless static, running as the non-root user 65532 that the chart's
# securityContext and fsGroup expect.

# The Go release .ci/run builds and tests with (GOTOOLCHAIN there): its
# standard library has no known reachable vulnerability (.ci/vulncheck).
FROM golang:1.27.3 AS build
WORKDIR /src
# Modules first, so a source change does not download them again.
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN CGO_ENABLED=0 GOOS=linux go build -trimpath -ldflags="-s -w" \
        -o /out/agentd ./agentd/cmd/agentd \
    && mkdir -p /out/data

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/agentd /usr/local/bin/agentd
# An empty /data owned by the runtime user, so a fresh volume mounted there
# (docker run -v, or a pod without fsGroup) is writable.
COPY --from=build --chown=65532:65532 /out/data /data
USER 65532:65532
# Listen on every interface inside a container; flags and FOREVER_* variables
# still override these. A non-loopback listen needs auth: run the image with
# --auth (docker run ... --auth), or --insecure to go without.
ENV FOREVER_DATA=/data \
    FOREVER_HTTP=0.0.0.0:8080
VOLUME ["/data"]
# 8080 HTTP (chat gateway, /healthz, /readyz, /metrics), 4222 NATS clients,
# 6222 NATS cluster routes.
EXPOSE 8080 4222 6222
ENTRYPOINT ["/usr/local/bin/agentd"]
