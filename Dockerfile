# Builds exactly what `make build` builds (every command under cmd/, CGO_ENABLED=0),
# then copies the binaries into a small non-root runtime image.
# Keep the build line in step with the Makefile's `build` target.
FROM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG VERSION=dev
RUN make build VERSION=${VERSION}

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /src/bin/ /usr/local/bin/
USER 65532:65532
ENTRYPOINT ["/usr/local/bin/vigil-manager"]
