# gpuinfer images from one source tree.
#   docker build --target lambda --output type=local,dest=dist .   → dist/bootstrap (router Lambda, provided.al2023)
#   docker build -t gpuinfer:v0.1.0 .                               → vLLM + gpuinfer worker (ECS GPU task)
# TARGET selects the Rust target: x86_64-unknown-linux-musl (default) or aarch64-unknown-linux-musl.

FROM rust:1.95.0-slim-bookworm AS build
ARG TARGET=x86_64-unknown-linux-musl
RUN apt-get update \
    && apt-get install -y --no-install-recommends musl-tools=1.2.3-1 cmake=3.25.1-1 \
    && rm -rf /var/lib/apt/lists/* \
    && rustup target add "${TARGET}"
WORKDIR /src
COPY Cargo.toml Cargo.lock ./
COPY src ./src
RUN cargo build --release --locked --bin gpuinfer --target "${TARGET}" \
    && cp "target/${TARGET}/release/gpuinfer" /gpuinfer

FROM scratch AS lambda
COPY --from=build /gpuinfer /bootstrap

FROM vllm/vllm-openai:v0.26.0 AS runtime
COPY --from=build /gpuinfer /usr/local/bin/gpuinfer
COPY entrypoint.sh /usr/local/bin/entrypoint.sh
RUN useradd --uid 1000 --create-home --shell /usr/sbin/nologin gpuinfer \
    && mkdir -p /models \
    && chown gpuinfer:gpuinfer /models
USER 1000
ENV MODEL_DIR=/models/model HOME=/home/gpuinfer
HEALTHCHECK --interval=30s --timeout=5s --start-period=300s --retries=3 CMD ["/usr/local/bin/gpuinfer", "healthcheck"]
ENTRYPOINT ["/usr/local/bin/entrypoint.sh"]
