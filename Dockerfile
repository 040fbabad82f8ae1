# Vigil's one image: every binary `make build` builds (every command under cmd/,
# CGO_ENABLED=0) on a small Debian runtime. The runtime carries what
# vigil-engine-node runs besides itself: mkfs.ext4 (e2fsprogs) and blkid
# (util-linux). It runs as the non-root user 65532; only the engine's container
# runs as root (deploy/base/engine-node.yaml), because it mounts.
# Build it with `make image` (needs a container engine); deploy/base names it
# "vigil" in its images: list. deploy/dockerfile_test.go keeps this file and
# `make build` in step.
FROM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG VERSION=dev
RUN make build VERSION=${VERSION}

FROM debian:bookworm-slim
RUN apt-get update \
	&& DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends e2fsprogs util-linux \
	&& rm -rf /var/lib/apt/lists/*
COPY --from=build /src/bin/ /usr/local/bin/
USER 65532:65532
ENTRYPOINT ["/usr/local/bin/vigil-manager"]
