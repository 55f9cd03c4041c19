# The berth-proxy image: one static binary on scratch plus CA certificates, running as UID 65532.
#
#   buildah bud -f images/proxy.Dockerfile -t ghcr.io/berth-dev/berth-proxy:0.1.0 .     # from the repo root
#   docker build -f images/proxy.Dockerfile -t ghcr.io/berth-dev/berth-proxy:0.1.0 .
#
# The build stage compiles the binary statically against glibc (-C target-feature=+crt-static on
# x86_64-unknown-linux-gnu), so it runs in an image with no libc. images/build.sh skips that stage
# (--build-arg BINARIES=prebuilt): it builds the binary with the same flags on the host and passes
# it in the build context as out/, since CI machines reach package registries but no image
# registry.
ARG RUST_IMAGE=docker.io/library/rust:1-bookworm
ARG BINARIES=build

FROM ${RUST_IMAGE} AS build
WORKDIR /src
COPY . .
RUN RUSTFLAGS="-C target-feature=+crt-static" cargo build --release --locked \
      --target x86_64-unknown-linux-gnu -p berth-proxy --bin berth-proxy \
 && mkdir -p /out \
 && cp target/x86_64-unknown-linux-gnu/release/berth-proxy /out/ \
 && cp /etc/ssl/certs/ca-certificates.crt /out/

FROM scratch AS prebuilt
COPY out/ /out/

FROM ${BINARIES} AS binaries

FROM scratch
ARG VERSION=0.1.0
ARG REVISION=unknown
COPY --from=binaries /out/ca-certificates.crt /etc/ssl/certs/ca-certificates.crt
COPY --from=binaries /out/berth-proxy /usr/local/bin/berth-proxy
USER 65532:65532
# mimalloc (the proxy's allocator) commits memory as it is used and gives freed pages back at
# once: idle RSS stays low and RSS after a load returns near idle (docs/benchmarks.md).
ENV MIMALLOC_ARENA_EAGER_COMMIT=0 MIMALLOC_PURGE_DELAY=0
ENTRYPOINT ["/usr/local/bin/berth-proxy"]
LABEL org.opencontainers.image.title="berth-proxy" \
      org.opencontainers.image.description="The berth MCP proxy; the same static binary is the stdio host (berth-proxy stdio-host) copied into upstream pods." \
      org.opencontainers.image.source="https://github.com/berth-dev/berth" \
      org.opencontainers.image.url="https://github.com/berth-dev/berth" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}"
