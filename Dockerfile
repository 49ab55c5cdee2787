# syntax=docker/dockerfile:1
#
# The npu-fleet image that dashboards/kubernetes/worker.yaml and docker-compose users run:
#
#   docker build -t npu-fleet .
#   docker run --rm -p 9464:9464 npu-fleet                 # `start`: memory broker, simulated NPUs, demo load
#   docker run --rm npu-fleet models validate examples/models --load
#   docker run --rm npu-fleet worker --device 0 --config /etc/npu-fleet/fleet.yaml   # with the config mounted
#
# Without CANN the addon drives the bundled ACL simulator (libacl_sim.so, next to the addon), which
# runs the ONNX models of examples/models on the CPU. CANN is not redistributable, so the image holds
# none of it. On an Ascend host, either mount the toolkit and driver from the host (as the Ascend
# device plugin setups do) and point the addon at it, e.g.
#
#   docker run --device /dev/davinci0 --device /dev/davinci_manager --device /dev/devmm_svm --device /dev/hisi_hdc \
#     -v /usr/local/Ascend/driver:/usr/local/Ascend/driver:ro \
#     -v /usr/local/Ascend/ascend-toolkit:/usr/local/Ascend/ascend-toolkit:ro \
#     -e ASCEND_HOME_PATH=/usr/local/Ascend/ascend-toolkit/latest \
#     -e LD_LIBRARY_PATH=<what CANN's set_env.sh puts there> npu-fleet worker --device 0 ...
#
# (the addon dlopens $NPU_FLEET_ACL_LIB, else $ASCEND_HOME_PATH or $ASCEND_TOOLKIT_HOME lib64/libascendcl.so),
# or build on an image that has CANN: --build-arg RUNTIME_IMAGE=<your CANN image>. That image must
# provide Node.js 20 on PATH and a glibc/libstdc++ at least as new as BUILD_IMAGE's (Debian bookworm:
# glibc 2.36), or the addon built here will not load; pass --build-arg BUILD_IMAGE=<a Node 20 image on
# the same OS> if it is older. The device nodes must be accessible to the image's user (1000:1000; add
# the group that owns /dev/davinci* with `--group-add` or the pod's supplementalGroups).

ARG BUILD_IMAGE=node:20-bookworm
ARG RUNTIME_IMAGE=node:20-bookworm-slim

FROM ${BUILD_IMAGE} AS build
WORKDIR /app

# node-gyp needs python3, make and a C++17 compiler. node:20-bookworm (buildpack-deps) has them;
# a slimmer BUILD_IMAGE gets them from apt. No CANN headers: the addon dlopens ACL at run time.
RUN if ! command -v python3 >/dev/null || ! command -v make >/dev/null || ! command -v g++ >/dev/null; then \
      apt-get update && apt-get install -y --no-install-recommends python3 make g++ && rm -rf /var/lib/apt/lists/*; \
    fi

# Only what `npm ci` needs, so editing TypeScript does not rebuild the native code. The package's
# install script builds build/Release/npu_fleet.node and build/Release/libacl_sim.so with node-gyp:
# with --omit=dev that is npm's bundled node-gyp (the project's pinned one is a dev dependency), and
# the headers come from the Node.js install (--nodedir), so the build fetches no headers.
COPY package.json package-lock.json binding.gyp ./
COPY native/src native/src
COPY native/acl-sim/include native/acl-sim/include
COPY native/acl-sim/src native/acl-sim/src
RUN --mount=type=cache,target=/root/.npm \
    npm ci --omit=dev --no-audit --no-fund

COPY tsconfig.json ./
COPY bin bin
COPY src src
COPY workers workers
COPY producers producers
COPY examples/models examples/models

# The runtime user owns nothing and writes nothing here, but must read everything: files keep the
# modes they had in the build context, so a checkout made under umask 077 would be root-only.
RUN chmod -R u=rwX,go=rX /app


FROM ${RUNTIME_IMAGE} AS runtime

# worker.maxSemiSpaceMb (64) as a V8 flag: `npu-fleet start` passes it to the workers it spawns, but
# V8 reads it once at start, so a worker run on its own (`worker --device N`, one container per NPU)
# gets it only from here (src/runtime/worker-node-flags.ts; it logs a warning without it).
# TSX_DISABLE_CACHE: tsx would cache its transforms under /tmp, which a container loses on restart
# anyway; with the cache off the image also runs with a read-only root filesystem (put
# worker.journalDir on a volume then, as the Kubernetes manifest does).
ENV NODE_ENV=production \
    NODE_OPTIONS=--max-semi-space-size=16 \
    TSX_DISABLE_CACHE=1

# bin/npu-fleet.js resolves src/, build/Release/ and tsconfig.json relative to this directory; the
# Kubernetes manifest's command (`node bin/npu-fleet.js worker ...`) runs here too.
WORKDIR /app

# tsx (a production dependency) runs the TypeScript sources as they are, with the project's tsconfig.
COPY --from=build /app/package.json /app/tsconfig.json ./
COPY --from=build /app/node_modules node_modules
COPY --from=build /app/build/Release/npu_fleet.node /app/build/Release/libacl_sim.so build/Release/
COPY --from=build /app/bin bin
COPY --from=build /app/src src
COPY --from=build /app/workers workers
COPY --from=build /app/producers producers
COPY --from=build /app/examples/models examples/models

# The node images' `node` user, by number so that Kubernetes' runAsNonRoot can verify it. Files stay
# root-owned and read-only to it; the in-flight journal defaults to the OS temp dir (/tmp), or a
# volume via worker.journalDir (the manifest's emptyDir).
USER 1000:1000

# worker.metricsPort: device N serves /metrics, /healthz and /readyz on 9464 + N.
EXPOSE 9464

# SIGTERM drains (intake stops, device batches finish, results are published and acked) and exits 0
# within worker.drainTimeoutMs (30 s): give `docker stop` a longer timeout (-t 45), as the manifest does.
STOPSIGNAL SIGTERM

# Docker's own check (Kubernetes ignores it and probes /healthz itself). It knows the port only from
# NPU_FLEET__WORKER__METRICS_PORT; with metricsPort set in a config file, set that variable too.
HEALTHCHECK --interval=10s --timeout=5s --start-period=60s --retries=3 \
  CMD ["node", "-e", "fetch('http://127.0.0.1:' + (process.env.NPU_FLEET__WORKER__METRICS_PORT || 9464) + '/healthz').then((r) => process.exit(r.ok ? 0 : 1), () => process.exit(1))"]

ENTRYPOINT ["node", "bin/npu-fleet.js"]
CMD ["start"]
