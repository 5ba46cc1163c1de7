#!/bin/bash -eu
# ClusterFuzzLite's build step (run in .clusterfuzzlite/Dockerfile's image, from $SRC/warmkey):
# fuzz/build.sh does the work with the engine's own $CC, $CXX, $CFLAGS, $CXXFLAGS and
# $LIB_FUZZING_ENGINE, writing <stem>_fuzzer, its seed corpus and dictionary into $OUT.
cd "$SRC/warmkey"

# NVRTC and the CUDA headers of the wheels the Dockerfile installed, as a CUDA toolkit root for
# CMake; libnvrtc travels with the harnesses ($OUT/lib, found through an $ORIGIN rpath), since the
# runner image has no CUDA.
if [ -d /opt/cuda-wheels/nvidia ]; then
  cuda=/opt/cuda-wheels/cuda-root
  mkdir -p "$cuda/include" "$cuda/lib64"
  cp -r /opt/cuda-wheels/nvidia/cuda_nvrtc/include/. /opt/cuda-wheels/nvidia/cuda_runtime/include/. "$cuda/include/"
  cp -a /opt/cuda-wheels/nvidia/cuda_nvrtc/lib/. "$cuda/lib64/"
  (cd "$cuda/lib64" && for f in libnvrtc.so.*; do [ -e libnvrtc.so ] || ln -s "$f" libnvrtc.so; done)
  export CUDAToolkit_ROOT="$cuda" CUDA_HOME="$cuda"
  mkdir -p "$OUT/lib"
  cp -a "$cuda"/lib64/libnvrtc* "$OUT/lib/"
  export LDFLAGS="${LDFLAGS:-} -Wl,-rpath,\$ORIGIN/lib"
fi

fuzz/build.sh
