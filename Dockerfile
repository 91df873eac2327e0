# The banlieue image: one static binary, 'banlieue', that runs the core controller
# ('banlieue controller') and each provider ('banlieue provider <class>'). It is the
# production build: without the build tag dev it links no simulator and has no 'dev'
# or 'sim' command (test/install checks both).
#
# `docker build -t banlieue:dev .` on a machine with a container runtime. banlieue's CI
# has none and reaches no image registry, so test/install runs this file's build step
# as written and checks the binary is static, the Go release matches go.mod and the
# image runs as non-root; the image itself is not built there.
#
# The Go version matches go.mod's go line; the binary is static (CGO_ENABLED=0), so the
# runtime image is distroless/static, which runs as the nonroot user 65532.
FROM golang:1.26 AS build
WORKDIR /src
ENV CGO_ENABLED=0 GOFLAGS=-mod=readonly
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG TARGETOS TARGETARCH
RUN GOOS=${TARGETOS:-linux} GOARCH=${TARGETARCH} go build -trimpath -ldflags="-s -w" -o /out/banlieue ./cmd/banlieue

FROM gcr.io/distroless/static:nonroot
COPY --from=build /out/banlieue /banlieue
USER 65532:65532
ENTRYPOINT ["/banlieue"]
