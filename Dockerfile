# gpuinfer images from one source tree. BuildKit only (COPY --chmod, RUN --mount): the default
# builder from Docker 23 on, DOCKER_BUILDKIT=1 before. There is no `# syntax=` line on purpose:
# the builder's own Dockerfile frontend is used, so nothing is pulled from Docker Hub for it.
#   docker build --target lambda --output type=local,dest=dist .   → dist/bootstrap (router Lambda, provided.al2023)
#   docker build --platform linux/amd64 -t gpuinfer:v0.1.0 .       → vLLM + gpuinfer worker (ECS GPU task)
# Build arguments:
#   TARGET      Rust target: x86_64-unknown-linux-musl (default) or aarch64-unknown-linux-musl. Build
#               on a host of that architecture (buildspec.yml picks it from `uname -m`): no emulation.
#               On an arm64 host: --build-arg TARGET=aarch64-unknown-linux-musl.
#   VLLM_IMAGE  base of the inference image: vllm/vllm-openai:v0.26.0 from Docker Hub (default), or
#               the same image through an ECR pull-through cache for Docker Hub,
#               <account>.dkr.ecr.<region>.amazonaws.com/<cache prefix>/vllm/vllm-openai:v0.26.0@sha256:….
#               Pinned by tag and digest: a tag can be pushed again, the digest cannot, so every build
#               starts from the same bytes (the tag stays for people; Docker pulls by the digest). The
#               digest is the tag's multi-platform index (linux/amd64 and linux/arm64) as public build
#               files that pin v0.26.0 give it, not read from the registry itself: check it once (below).
#               A wrong digest cannot build another image: the pull fails ("manifest unknown"). To check
#               it, or to move to another release, read the digest with
#               `docker buildx imagetools inspect vllm/vllm-openai:<tag>` (the "Digest:" line) or
#               `crane digest vllm/vllm-openai:<tag>`, then change it here and in template.yaml (Build
#               project, VLLM_IMAGE) together, or pass --build-arg VLLM_IMAGE=vllm/vllm-openai:<tag>@sha256:<digest>.
# The Rust image is ECR Public's copy of the Docker Hub official image (no Docker Hub pull limit).
# The cargo registry and target folder live in BuildKit cache mounts, so after the first build on
# a builder a source change recompiles gpuinfer only, not its dependencies.
# The build stage's COPY lines must bring every file Cargo.toml declares (src/, benches/, ...):
# scripts/check-docker-context.sh, run by scripts/test.sh, checks that without a Docker engine.

ARG VLLM_IMAGE=vllm/vllm-openai:v0.26.0@sha256:ffb2d59b1c059a5bd8d781320c9f5189de8293693b7d95da54befddaa54abf52

FROM public.ecr.aws/docker/library/rust:1.95.0-slim-bookworm AS build
ARG TARGET=x86_64-unknown-linux-musl
RUN apt-get update \
    && apt-get install -y --no-install-recommends musl-tools=1.2.3-1 cmake=3.25.1-1 \
    && rm -rf /var/lib/apt/lists/* \
    && rustup target add "${TARGET}"
WORKDIR /src
COPY Cargo.toml Cargo.lock ./
COPY src ./src
COPY benches ./benches
# The cached target folder outlives the sources: cargo trusts file times, and COPY keeps the times
# the source archive gave (e.g. `git archive` stamps every file with its commit's time, so building
# an older commit after a newer one would look up to date). Touching the sources makes cargo
# rebuild gpuinfer every time this RUN runs (it only runs when a COPY above brought a change);
# the dependencies stay cached. The binaries are copied out of the cache mount in the same RUN.
# Two builds of the same source: /gpuinfer with every subcommand (the Lambda bootstrap: router,
# scaler), and /gpuinfer-container with only what the inference container runs (worker,
# healthcheck, fetch-model, inject-xid), optimized for size: its resident memory is mostly its own
# code pages (Cargo.toml, profile.container; BENCHMARKS.md, P6).
RUN --mount=type=cache,target=/usr/local/cargo/registry,sharing=locked \
    --mount=type=cache,target=/src/target,sharing=locked \
    find src benches -type f -exec touch {} + \
    && cargo build --release --locked --bin gpuinfer --target "${TARGET}" \
    && cp "target/${TARGET}/release/gpuinfer" /gpuinfer \
    && cargo build --profile container --locked --bin gpuinfer --no-default-features --target "${TARGET}" \
    && cp "target/${TARGET}/container/gpuinfer" /gpuinfer-container

FROM scratch AS lambda
COPY --from=build /gpuinfer /bootstrap

FROM ${VLLM_IMAGE} AS runtime
COPY --from=build /gpuinfer-container /usr/local/bin/gpuinfer
COPY --chmod=0755 entrypoint.sh /usr/local/bin/entrypoint.sh
# uid 1000 may exist already (`ubuntu` in Ubuntu 24.04 based images): then it is used as it is,
# else user gpuinfer is created with it. Either way /models and HOME belong to uid 1000, the user the
# engine and the worker run as. entrypoint.sh drops to it with setpriv (util-linux, essential in
# Ubuntu): the build stops here if a base image lacks it, rather than every task at its start.
RUN if ! getent passwd 1000 >/dev/null; then \
        useradd --uid 1000 --user-group --no-create-home --home-dir /home/gpuinfer --shell /usr/sbin/nologin gpuinfer; \
    fi \
    && mkdir -p /models /home/gpuinfer \
    && chown "1000:$(id -g 1000)" /models /home/gpuinfer \
    && setpriv --version
# The container starts as root for entrypoint.sh alone: the large tier's /dev/shm is an ECS task volume
# that Docker creates root-owned 0755, and only root can open it up (mode 1777) for the engine. The script
# then re-executes itself as uid 1000 (setpriv --reuid --regid --clear-groups --no-new-privs), so the
# supervisor, the engine and the worker never run as root. Said explicitly, so a base image that ends
# on another user cannot change it.
# hadolint ignore=DL3002 # root only until entrypoint.sh has opened /dev/shm; it then drops to uid 1000 itself
USER 0
ENV MODEL_DIR=/models/model HOME=/home/gpuinfer
HEALTHCHECK --interval=30s --timeout=5s --start-period=300s --retries=3 CMD ["/usr/local/bin/gpuinfer", "healthcheck"]
ENTRYPOINT ["/usr/local/bin/entrypoint.sh"]
