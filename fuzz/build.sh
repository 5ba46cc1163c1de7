#!/bin/bash -eu
# Builds warmkey's libFuzzer harnesses the OSS-Fuzz way: compilers and flags from $CC, $CXX,
# $CFLAGS, $CXXFLAGS, the engine from $LIB_FUZZING_ENGINE, binaries, seed corpora
# (<name>_seed_corpus.zip) and dictionaries (<name>.dict, from fuzz/dict/) into $OUT. Run from
# anywhere (ClusterFuzzLite runs it through .clusterfuzzlite/build.sh); defaults make a local
# libFuzzer build:
#   CC=clang CXX=clang++ fuzz/build.sh        # -> ./out/<stem>_fuzzer, ./out/<stem>_fuzzer_seed_corpus.zip
SRC_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
: "${CC:=clang}"
: "${CXX:=clang++}"
: "${CFLAGS:=-O1 -g -fsanitize=address,fuzzer-no-link}"
: "${CXXFLAGS:=-O1 -g -fsanitize=address,fuzzer-no-link}"
: "${LIB_FUZZING_ENGINE:=-fsanitize=fuzzer}"
: "${OUT:=$PWD/out}"
: "${WORK:=$PWD/work-fuzz-build}"
mkdir -p "$OUT" "$WORK"

cmake -S "$SRC_DIR" -B "$WORK" -G Ninja \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_C_COMPILER="$CC" -DCMAKE_CXX_COMPILER="$CXX" \
  -DCMAKE_C_FLAGS="$CFLAGS" -DCMAKE_CXX_FLAGS="$CXXFLAGS" \
  -DCMAKE_EXE_LINKER_FLAGS="${LDFLAGS:-}" \
  -DWARMKEY_BUILD_FUZZ=ON -DWARMKEY_BUILD_TESTS=OFF -DWARMKEY_BUILD_BENCH=OFF \
  -DWARMKEY_FUZZ_ENGINE="$LIB_FUZZING_ENGINE"
cmake --build "$WORK" --target warmkey_fuzzers

# One harness per kernel with an input space (fuzz/harness/fuzzer.cpp, built per kernel by CMake).
for harness in "$WORK"/fuzz/*_fuzzer; do
  name="$(basename "$harness")"
  stem="${name%_fuzzer}"
  cp "$WORK/fuzz/$name" "$OUT/$name"
  corpus="$SRC_DIR/fuzz/corpus/$stem"
  if [ -d "$corpus" ] && [ -n "$(ls -A "$corpus")" ]; then
    rm -f "$OUT/${name}_seed_corpus.zip"
    (cd "$corpus" && zip -q -j "$OUT/${name}_seed_corpus.zip" ./*)
  fi
  if [ -f "$SRC_DIR/fuzz/dict/$name.dict" ]; then
    cp "$SRC_DIR/fuzz/dict/$name.dict" "$OUT/$name.dict"
  fi
done
