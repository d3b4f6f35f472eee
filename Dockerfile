# syntax=docker/dockerfile:1
# Image of the sidecarset-operator (webhook server and controller).
#
#   docker build -t sidecarset-operator:dev --build-arg VERSION=0.1.0 [--build-arg SOURCE_URL=...] .
#
# The builder uses the same Debian release (bookworm, glibc 2.36) as the runtime image, because
# the binary links glibc dynamically. TLS is rustls with ring: no OpenSSL at run time.

ARG RUST_VERSION=1.95

FROM rust:${RUST_VERSION}-bookworm AS builder
WORKDIR /src

# 1. Dependencies only, cached until a Cargo.toml or Cargo.lock changes. Every workspace member
#    and declared target needs a file for cargo to load the workspace, so stubs stand in for them.
COPY Cargo.toml Cargo.lock ./
COPY crates/core/Cargo.toml crates/core/Cargo.toml
COPY crates/operator/Cargo.toml crates/operator/Cargo.toml
COPY crates/cli/Cargo.toml crates/cli/Cargo.toml
COPY crates/e2e/Cargo.toml crates/e2e/Cargo.toml
RUN for c in core operator cli e2e; do mkdir -p crates/$c/src && touch crates/$c/src/lib.rs; done \
 && mkdir -p crates/operator/benches \
 && echo 'fn main() {}' > crates/operator/src/main.rs \
 && for b in inject webhook_load simulate; do echo 'fn main() {}' > crates/operator/benches/$b.rs; done \
 && cargo build --release --locked --bin sidecarset-operator \
 && rm -rf crates/*/src crates/operator/benches

# 2. The real sources. Touch the crate roots: COPY keeps the files' old mtimes, and cargo would
#    otherwise take the stub build of step 1 as up to date.
COPY crates/core/src crates/core/src
COPY crates/operator/src crates/operator/src
COPY crates/operator/benches crates/operator/benches
COPY crates/cli/src crates/cli/src
COPY crates/e2e/src crates/e2e/src
RUN touch crates/operator/src/main.rs crates/operator/src/lib.rs crates/core/src/lib.rs crates/cli/src/lib.rs \
 && cargo build --release --locked --bin sidecarset-operator \
 && install -D -m 0755 target/release/sidecarset-operator /out/sidecarset-operator

FROM gcr.io/distroless/cc-debian12:nonroot
ARG VERSION=dev
ARG SOURCE_URL=""
LABEL org.opencontainers.image.title="sidecarset-operator" \
      org.opencontainers.image.description="Kubernetes operator that injects and upgrades sidecar containers, driven by OpenKruise-compatible SidecarSets" \
      org.opencontainers.image.source="${SOURCE_URL}" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.licenses="Apache-2.0"
COPY --from=builder /out/sidecarset-operator /sidecarset-operator
COPY LICENSE /LICENSE
USER 65532:65532
EXPOSE 9443
ENTRYPOINT ["/sidecarset-operator"]
CMD ["run"]
